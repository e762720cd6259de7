#!/bin/sh
# Spawn latency: `hutch run -- true` against bubblewrap and unshare(1).
#
#   benches/spawn.sh [--runs N] [--rounds N] [--warmup N] [--hutch "ARGS"]...
#                    [--row NAME=CMD]... [--user UID] [--check] [--cpu]
#
# Builds hutch in release mode, then runs every row in one hyperfine
# invocation (no intermediate shell: --shell=none), repeated for --rounds
# rounds of runs/rounds spawns each so that a change in machine load hits
# all rows alike. It exports the raw results as JSON ($TMPDIR/hutch-spawn-
# <date>.json, or $HUTCH_BENCH_JSON; one file per round with .N appended),
# and prints, over all rounds, the median per-spawn time of each row and
# the ratio of every hutch row to bwrap (overall, and the range of the
# per-round ratios). The target is hutch <= 0.5 x bwrap. On a loaded
# machine wall-clock times mostly measure the load; compare CPU time with
# `perf stat -r 100 CMD` (task-clock counts every descendant).
#
# Rows always run: `hutch run -- true` (default profile, cwd = a fresh
# temporary directory), bwrap, hutch-bwrap (the bubblewrap front end,
# docs/bwrap.md: bwrap's very argv; its target is <= 1.0 x bwrap), unshare
# (the issue's reference), and
# unshare+net: `unshare -Urmpiufn --mount-proc true`, the namespace set
# every hutch run must create (with the network namespace) and nothing
# else, one process and no sandboxing: a floor no launcher that creates
# these namespaces per run goes below. Extra rows:
#   --hutch "--seccomp default"     adds `hutch run --seccomp default -- true`
#   --row "name=cmd args"           adds an arbitrary command
# --user UID (as root) runs every row through `setpriv --reuid=UID ...` to
# time the unprivileged path (setpriv's own cost, ~1-2 ms, is in every row).
# HUTCH_BIN=/path/to/hutch skips the build and times that binary (and the
# hutch-bwrap next to it, or $HUTCH_BWRAP_BIN).
# --check exits 1 when a hutch row is slower than 0.5 x bwrap (default: 0,
# it is a benchmark, not a test).
# --cpu also measures CPU time (perf stat task-clock, every descendant
# counted), row after row in each round, and prints its mean per spawn
# and the ratio to bwrap: on a shared machine the steadier comparison.
set -eu

runs=300
rounds=5
warmup=10
check=0
cpu=0
user=""
extra_names=""   # newline-separated, parallel to extra_cmds
extra_cmds=""
nl='
'
root=$(cd "$(dirname "$0")/.." && pwd)

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --hutch) extra_names="$extra_names${nl}hutch $2"
                 extra_cmds="$extra_cmds${nl}HUTCH run $2 -- true"; shift 2 ;;
        --row) extra_names="$extra_names${nl}${2%%=*}"
               extra_cmds="$extra_cmds${nl}${2#*=}"; shift 2 ;;
        --check) check=1; shift ;;
        --cpu) cpu=1; shift ;;
        --user) user=$2; shift 2 ;;
        -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "spawn.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

for tool in hyperfine bwrap unshare python3 cargo; do
    command -v "$tool" >/dev/null || { echo "spawn.sh: $tool is not installed" >&2; exit 2; }
done

if [ -n "${HUTCH_BIN:-}" ]; then
    hutch=$HUTCH_BIN   # an already built binary (e.g. to compare branches)
else
    echo "building hutch (release)..." >&2
    hutch=$("$root/benches/hutch-path.sh" --release)
    (cd "$root" && cargo build --quiet --release --bin hutch-bwrap)
fi
hutch_bwrap=${HUTCH_BWRAP_BIN:-$(dirname "$hutch")/hutch-bwrap}
[ -x "$hutch_bwrap" ] || { echo "spawn.sh: no hutch-bwrap at $hutch_bwrap (set HUTCH_BWRAP_BIN)" >&2; exit 2; }

# hutch overlays its cwd: give it a fresh, empty directory.
work=$(mktemp -d "${TMPDIR:-/tmp}/hutch-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cd "$work"
as=""
if [ -n "$user" ]; then
    # The binary must be reachable by UID: copy it next to the work dir.
    chmod 0755 "$work"
    mkdir "$work/bin" "$work/cwd"
    cp "$hutch" "$work/bin/hutch"
    cp "$hutch_bwrap" "$work/bin/hutch-bwrap"
    chmod 0755 "$work/bin" "$work/bin/hutch" "$work/bin/hutch-bwrap"
    chown "$user:$user" "$work/cwd"
    hutch="$work/bin/hutch"
    hutch_bwrap="$work/bin/hutch-bwrap"
    cd "$work/cwd"
    as="setpriv --reuid=$user --regid=$user --clear-groups "
fi

# Every row must work before it is timed.
$as"$hutch" run -- true || { echo "spawn.sh: \`hutch run -- true\` fails here (see above)" >&2; exit 1; }

json=${HUTCH_BENCH_JSON:-${TMPDIR:-/tmp}/hutch-spawn-$(date +%Y%m%d-%H%M%S).json}
mkdir -p "$(dirname "$json")"

bwrap_argv="--unshare-all --die-with-parent --new-session --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp true"
# shellcheck disable=SC2086  # the argv, split into words
$as"$hutch_bwrap" $bwrap_argv || { echo "spawn.sh: hutch-bwrap fails here (see above)" >&2; exit 1; }

per_round=$(( (runs + rounds - 1) / rounds ))
[ "$per_round" -ge 2 ] || per_round=2
set -- --shell=none --warmup "$warmup" --runs "$per_round" --style basic \
    -n "hutch" "$as$hutch run -- true" \
    -n "bwrap" "${as}bwrap $bwrap_argv" \
    -n "hutch-bwrap" "$as$hutch_bwrap $bwrap_argv" \
    -n "unshare" "${as}unshare -Urmpiuf --mount-proc true" \
    -n "unshare+net" "${as}unshare -Urmpiufn --mount-proc true"
if [ -n "$extra_names" ]; then
    i=1
    while :; do
        name=$(printf '%s\n' "$extra_names" | sed -n "$((i + 1))p")
        cmd=$(printf '%s\n' "$extra_cmds" | sed -n "$((i + 1))p")
        [ -n "$name" ] || break
        cmd=$as$(printf '%s' "$cmd" | sed "s|^HUTCH |$hutch |")
        set -- "$@" -n "$name" "$cmd"
        i=$((i + 1))
    done
fi
round=1
while [ "$round" -le "$rounds" ]; do
    echo "round $round/$rounds ($per_round spawns per row)" >&2
    hyperfine --export-json "$json.$round" "$@" >/dev/null
    round=$((round + 1))
done

if [ "$cpu" = 1 ]; then
    command -v perf >/dev/null || { echo "spawn.sh: --cpu needs perf" >&2; exit 2; }
    # The same rows as hyperfine's (-n NAME CMD triples after the options).
    rows=""
    skip=7   # --shell=none --warmup N --runs N --style basic
    i=0
    for arg in "$@"; do
        i=$((i + 1))
        [ "$i" -gt "$skip" ] || continue
        rows="$rows$arg$nl"
    done
    cpu_out="$json.cpu"
    : > "$cpu_out"
    round=1
    while [ "$round" -le "$rounds" ]; do
        echo "cpu round $round/$rounds" >&2
        printf '%s' "$rows" | while IFS= read -r flag && IFS= read -r name && IFS= read -r cmd; do
            [ "$flag" = "-n" ] || continue
            set -f
            # shellcheck disable=SC2086  # the row's command, split into words
            ms=$(perf stat -r "$per_round" -x, -e task-clock -- $cmd 2>&1 >/dev/null \
                | awk -F, '$3 == "task-clock" { print $1 }')
            set +f
            printf '%s\t%s\n' "$name" "$ms" >> "$cpu_out"
        done
        round=$((round + 1))
    done
fi

python3 - "$json" "$rounds" "$check" "$cpu" <<'PY'
import json, os, statistics, sys
base, rounds, check = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
cpu = sys.argv[4] == "1"
rows = {}   # name -> {"times": [...], "round_medians": [...]}
order = []
for i in range(1, rounds + 1):
    for r in json.load(open(f"{base}.{i}"))["results"]:
        row = rows.setdefault(r["command"], {"times": [], "round_medians": []})
        if r["command"] not in order:
            order.append(r["command"])
        row["times"] += r["times"]
        row["round_medians"].append(r["median"])
summary = {
    name: {
        "median": statistics.median(rows[name]["times"]),
        "mean": statistics.mean(rows[name]["times"]),
        "round_medians": rows[name]["round_medians"],
        "spawns": len(rows[name]["times"]),
    }
    for name in order
}
bwrap = summary["bwrap"]
print(f"{'row':28} {'median':>9} {'mean':>9}  median vs bwrap (per-round range)")
slow = []
for name in order:
    s = summary[name]
    ratio = s["median"] / bwrap["median"]
    per_round = [a / b for a, b in zip(s["round_medians"], bwrap["round_medians"])]
    s["ratio_to_bwrap"] = ratio
    print(f"{name:28} {s['median']*1e3:7.2f}ms {s['mean']*1e3:7.2f}ms  "
          f"{ratio:5.2f}x ({min(per_round):.2f}-{max(per_round):.2f})")
    # hutch-bwrap runs bwrap's own argv (bwrap's semantics, not hutch's
    # sandbox): its target is parity, the hutch rows' is half.
    target = 1.0 if name == "hutch-bwrap" else 0.5
    if name.startswith("hutch") and ratio > target:
        slow.append(f"{name} ({ratio:.2f}x)")
if cpu:
    per = {}
    for line in open(f"{base}.cpu"):
        name, _, ms = line.rstrip("\n").partition("\t")
        if ms:
            per.setdefault(name, []).append(float(ms))
    if "bwrap" in per:
        ref = statistics.mean(per["bwrap"])
        print(f"{'row':28} {'cpu/spawn':>9}  vs bwrap (per-round)")
        for name in order:
            if name not in per:
                continue
            m = statistics.mean(per[name])
            summary[name]["cpu_ms"] = m
            rounds_txt = " ".join(f"{v:.2f}" for v in per[name])
            print(f"{name:28} {m:7.2f}ms  {m / ref:5.2f}x ({rounds_txt})")
json.dump(summary, open(base, "w"), indent=2)
print(f"target: hutch <= 0.50x bwrap, hutch-bwrap <= 1.00x; {'MISSED by ' + ', '.join(slow) if slow else 'met'}")
if "unshare+net" in summary:
    floor = summary["unshare+net"]["median"]
    hutch = summary["hutch"]["median"]
    print(f"floor: unshare+net (the namespaces alone, no sandbox) is "
          f"{floor / bwrap['median']:.2f}x bwrap; hutch spends {(hutch - floor) * 1e3:.2f} ms "
          f"over it, bwrap {(bwrap['median'] - floor) * 1e3:.2f} ms")
print(f"summary: {base} (per round: {base}.1 .. {base}.{rounds})")
sys.exit(1 if check and slow else 0)
PY
