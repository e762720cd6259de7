#!/bin/sh
# Where a warm `Session.run(["true"])` from Python spends its time: the
# median of each step over N calls, from `perf record` of a few
# tracepoints (light enough not to move the figures much), and Python's
# own share before the request is written and after its exit event is
# read (docs/decisions/0007-serve-fork-per-request.md, "Addendum (s8)").
#
#   benches/session_phases.sh [--python PY] [--calls N]
#
# PY must import the hutch package (PYTHONPATH=python with HUTCH_BIN=<a
# release hutch> is the quick way). Needs root and perf (system-wide
# tracepoints). Steps, each from the end of the one before:
#   connect     the request written -> the request process connects to
#               the session's warm.sock (server, hand-over, CLI parse,
#               session lock and files, audit start)
#   create      -> hutch init's FSCONFIG_CMD_CREATE of the overlay (the
#               keeper's hand-over, the claim, the supervisor)
#   created     the overlay's creation
#   execve      -> the workload's execve (mount, stage detach, clone)
#   true_exit   `true` from execve to its exit
#   done        -> the request process says `done` (reap, report, usage,
#               audit, progress, envelope)
#   exit_event  -> the server's exit event
# A benchmark, not a test: it always exits 0 once it ran.
set -eu

calls=200
python=python3
while [ $# -gt 0 ]; do
    case "$1" in
        --python) python=$2; shift 2 ;;
        --calls) calls=$2; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "session_phases.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "session_phases.sh: perf is not installed" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "session_phases.sh: needs root (system-wide perf tracepoints)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/hutch-phases.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

# The client: a warm session of 2, settled; it says when it is ready,
# waits for the recorder, then makes N calls 8 ms apart and times
# Python's share of each.
cat > "$work/client.py" <<'PY'
import os, statistics, sys, tempfile, time
import hutch
from hutch import _serve
calls, work = int(sys.argv[1]), sys.argv[2]
state = os.path.join(work, "state"); os.mkdir(state, 0o700)
src = os.path.join(work, "src"); os.mkdir(src)
os.chdir(src)
s = hutch.Session.create(from_dir=src, state_dir=state)
s.warm(2); s.warm_ready()
for _ in range(30):
    s.run(["true"])
marks = {}
send, end = _serve.Server.send, _serve.Server._end
def timed_send(self, doc):
    marks["w"] = time.perf_counter(); return send(self, doc)
def timed_end(self, rid, r):
    marks["e"] = time.perf_counter(); return end(self, rid, r)
_serve.Server.send, _serve.Server._end = timed_send, timed_end
open(os.path.join(work, "ready"), "w").close()
while not os.path.exists(os.path.join(work, "go")):
    time.sleep(0.05)
pre, post, total = [], [], []
for _ in range(calls):
    t0 = time.perf_counter(); s.run(["true"]); t1 = time.perf_counter()
    pre.append(marks["w"] - t0); post.append(t1 - marks["e"]); total.append(t1 - t0)
    time.sleep(0.008)
s.close()
ms = lambda v: statistics.median(v) * 1e3
print(f"python: before the request {ms(pre):.3f} ms, after its exit event {ms(post):.3f} ms, "
      f"whole call {ms(total):.3f} ms (p50 of {calls})")
open(os.path.join(work, "done"), "w").close()
PY

"$python" "$work/client.py" "$calls" "$work" > "$work/client.out" 2>&1 &
client=$!
while [ ! -e "$work/ready" ]; do
    kill -0 "$client" 2>/dev/null || { cat "$work/client.out" >&2; exit 1; }
    sleep 0.1
done
perf record -a -q -o "$work/perf.data" \
    -e syscalls:sys_enter_write --filter 'fd == 4 || fd == 100 || fd == 1' \
    -e syscalls:sys_enter_connect \
    -e syscalls:sys_enter_fsconfig --filter 'cmd == 6' -e syscalls:sys_exit_fsconfig \
    -e syscalls:sys_enter_execve -e sched:sched_process_exit \
    -- sleep 100000 2>/dev/null &
recorder=$!
sleep 1
touch "$work/go"
while [ ! -e "$work/done" ]; do
    kill -0 "$client" 2>/dev/null || break
    sleep 0.2
done
kill -INT "$recorder"; wait "$recorder" 2>/dev/null || true
wait "$client" || true
cat "$work/client.out"
perf script -i "$work/perf.data" -F comm,pid,time,event,trace 2>/dev/null > "$work/events.txt"

python3 - "$work/events.txt" <<'PY'
import re, statistics, sys
events = []
for line in open(sys.argv[1]):
    m = re.match(r'\s*(\S.*?)\s+(\d+)\s+(\d+\.\d+):\s+(\S+):\s*(.*)', line)
    if m:
        comm, _, t, name, rest = m.groups()
        events.append((float(t) * 1e3, comm, name, rest))
# A call starts with Python's request line (its server's stdin is fd 4).
calls, cur = [], None
for e in events:
    if e[1] == "python" and "sys_enter_write" in e[2] and "fd: 0x00000004" in e[3]:
        if cur:
            calls.append(cur)
        cur = [e]
    elif cur is not None:
        cur.append(e)
if cur:
    calls.append(cur)
order = ["connect", "create", "created", "execve", "true_exit", "done", "exit_event"]
steps = {k: [] for k in order}
totals = []
for c in calls:
    t0, marks = c[0][0], {}
    for t, comm, name, rest in c[1:]:
        key = None
        if "sys_enter_connect" in name and "connect" not in marks:
            key = "connect"
        elif "sys_enter_fsconfig" in name and "create" not in marks:
            key = "create"
        elif "sys_exit_fsconfig" in name and "create" in marks and "created" not in marks:
            key = "created"
        elif "sys_enter_execve" in name and "created" in marks and "execve" not in marks:
            key = "execve"
        elif "sched_process_exit" in name and comm == "true" and "true_exit" not in marks:
            key = "true_exit"
        elif "sys_enter_write" in name and "fd: 0x00000064" in rest and "done" not in marks:
            key = "done"
        elif ("sys_enter_write" in name and "fd: 0x00000001" in rest and "done" in marks
              and "exit_event" not in marks):
            key = "exit_event"
        if key:
            marks[key] = t - t0
    if all(k in marks for k in order):
        prev = 0.0
        for k in order:
            steps[k].append(marks[k] - prev)
            prev = marks[k]
        totals.append(marks["exit_event"])
print(f"{len(totals)} of {len(calls)} calls complete (a call missing a step, e.g. served cold, is left out)")
if totals:
    for k in order:
        print(f"  {k:11s} p50 {statistics.median(steps[k]):.3f} ms")
    print(f"  {'total':11s} p50 {statistics.median(totals):.3f} ms (request written -> exit event)")
PY
