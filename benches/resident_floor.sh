#!/usr/bin/env bash
# The kernel's part of a resident sandbox (docs/decisions/0007, "Addendum
# (s10)"): in one sandbox kept for many commands, what a command costs when
# it gets fresh pid, mount and ipc (and net) namespaces of its own, against
# a plain spawn in the same sandbox (the peer), measured in the same run.
# Not hutch: a C model of the design (benches/resident_floor.c), to know
# what the design can reach before it is built.
#
#   benches/resident_floor.sh [--runs N] [--gap MS]
#
# Each mode runs N commands (`/usr/bin/true`) GAP ms apart (default 8: as
# between an agent's tool calls; 0 for back to back), rounds interleaved.
# Prints p50 and p90 per command, the p50 over the plain spawn's, and the
# CPU per command (the sandbox's whole CPU over N). Needs gcc and user
# namespaces; runs as any user.
# A benchmark, not a test: it always exits 0 once it ran.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=300
gap=8
rounds=3
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --gap) gap=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "resident_floor.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
work=$(mktemp -d "${TMPDIR:-/tmp}/hutch-resident-floor.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
gcc -O2 -Wall -o "$work/rf" "$here/resident_floor.c"
modes="plain fresh fresh-net ahead ahead-net teardown-net"
for _ in $(seq "$rounds"); do
    for m in $modes; do "$work/rf" "$m" "$runs" "$gap"; done
done > "$work/out"
echo "== resident sandbox, one command = /usr/bin/true, $runs commands $gap ms apart, median of $rounds rounds"
python3 - "$work/out" "$modes" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m, p50, p90, cpu = line.split()
    rows.setdefault(m, []).append((float(p50), float(p90), float(cpu)))
med = {m: [statistics.median(v[i] for v in rows[m]) for i in range(3)] for m in rows}
base = med["plain"][0]
what = {
    "plain": "spawn in the resident sandbox (peer)",
    "fresh": "+ pid/mount/ipc ns, /proc, /tmp, /dev/shm",
    "fresh-net": "+ a network namespace, lo up",
    "ahead": "fresh, made before the command",
    "ahead-net": "fresh-net, made before the command",
    "teardown-net": "fresh-net, answered after its teardown",
}
print(f"  {'mode':<13} {'p50 ms':>7} {'p90 ms':>7} {'x plain':>8} {'cpu ms':>7}  what")
for m in sys.argv[2].split():
    p50, p90, cpu = med[m]
    print(f"  {m:<13} {p50:7.3f} {p90:7.3f} {p50 / base:8.2f} {cpu:7.3f}  {what[m]}")
PY
