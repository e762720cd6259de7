#!/bin/sh
# What seccomp costs a spawn: `hutch run --seccomp PROFILE -- true` for the
# built-in profiles against `--seccomp unconfined`.
#
#   benches/seccomp.sh [--runs N] [--rounds N] [--warmup N]
#
# Builds hutch in release mode (HUTCH_BIN=/path/to/hutch times that binary
# instead), then times the rows in interleaved hyperfine rounds
# (--shell=none), so that a change in machine load hits all rows alike, and
# prints each row's median and its ratio to the unconfined row: the
# profile's load, compile and install on the spawn path, plus its filter's
# cost for the few syscalls of `true`. Everything else (namespaces, the
# root, Landlock) is the same in every row. This replaces a test that
# asserted compile times; it is a benchmark, not a test (exit 0 unless a
# row fails to run).
set -eu

runs=200
rounds=5
warmup=10
root=$(cd "$(dirname "$0")/.." && pwd)

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "seccomp.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

for tool in hyperfine python3 cargo; do
    command -v "$tool" >/dev/null || { echo "seccomp.sh: $tool is not installed" >&2; exit 2; }
done

if [ -n "${HUTCH_BIN:-}" ]; then
    hutch=$HUTCH_BIN
else
    echo "building hutch (release)..." >&2
    hutch=$("$root/benches/hutch-path.sh" --release)
fi

# hutch overlays its cwd: give it a fresh, empty directory.
work=$(mktemp -d "${TMPDIR:-/tmp}/hutch-bench-seccomp.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cd "$work"

profiles="unconfined default strict"
for p in $profiles; do
    "$hutch" run --seccomp "$p" -- true ||
        { echo "seccomp.sh: \`hutch run --seccomp $p -- true\` fails here (see above)" >&2; exit 1; }
done

per_round=$(( (runs + rounds - 1) / rounds ))
[ "$per_round" -ge 2 ] || per_round=2
set -- --shell=none --warmup "$warmup" --runs "$per_round" --style basic
for p in $profiles; do
    set -- "$@" -n "$p" "$hutch run --seccomp $p -- true"
done
json="$work/seccomp.json"
round=1
while [ "$round" -le "$rounds" ]; do
    echo "round $round/$rounds ($per_round spawns per row)" >&2
    hyperfine --export-json "$json.$round" "$@" >/dev/null
    round=$((round + 1))
done

python3 - "$json" "$rounds" <<'PY'
import json, statistics, sys
base, rounds = sys.argv[1], int(sys.argv[2])
rows, order = {}, []
for i in range(1, rounds + 1):
    for r in json.load(open(f"{base}.{i}"))["results"]:
        row = rows.setdefault(r["command"], {"times": [], "round_medians": []})
        if r["command"] not in order:
            order.append(r["command"])
        row["times"] += r["times"]
        row["round_medians"].append(r["median"])
ref = rows["unconfined"]
ref_median = statistics.median(ref["times"])
print(f"{'--seccomp':12} {'median':>9}  vs unconfined (per-round range)  extra")
for name in order:
    r = rows[name]
    median = statistics.median(r["times"])
    per_round = [a / b for a, b in zip(r["round_medians"], ref["round_medians"])]
    print(f"{name:12} {median * 1e3:7.2f}ms  {median / ref_median:5.2f}x "
          f"({min(per_round):.2f}-{max(per_round):.2f})"
          f"{'':14}{(median - ref_median) * 1e3:+.2f} ms")
PY
