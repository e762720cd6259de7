#!/bin/sh
# Warm sandboxes (issue 15): a session command served from a ready sandbox
# against bubblewrap, a cold session command and a cold `hutch run`.
#
#   benches/warm.sh [--runs N] [--rounds N] [--warmup N] [--warm N]
#
# One hyperfine invocation per round (--shell=none), every row in each
# round, so that machine load hits all rows alike:
#   warm     hutch session run WARM_ID -- true   (session created --warm N),
#            back to back: the refill after one command races the next
#   ready    the same, each run after `hutch session warm WARM_ID --ready`
#            (hyperfine --prepare, not timed): the server settled, as
#            between an agent's tool calls
#   session  hutch session run COLD_ID -- true   (the same, without a server)
#   hutch    hutch run -- true
#   bwrap    bwrap --unshare-all ... true
#   start    hutch --version              (the binary's start-up floor)
# and, after each round's hyperfine, the library driver (below) for as
# many rounds. Prints the median per command of each row, the ratios
# warm/bwrap, warm/session and warm/hutch (target: warm <= 0.3 x bwrap),
# and the bound of the CLI row: what `session run` would cost if its own
# work (argument parsing, session lock, session.json, audit lines, the
# connection to the server) were free, i.e. the binary's start plus a
# library claim, over bwrap. Two bounds: for `ready`, with the library
# claim of a pool found warm (its p50), and for `warm`, back to back (1 /
# its sustained rate: each command then pays for a refill racing the
# next). Then the
# library driver (examples/warm_bench.rs) prints, measured in one process
# and interleaved, posix_spawn of /bin/true (the floor) against
# `hutch::Pool::command(["true"]).status()` (p50 and p99; targets 1.5x and
# 3x the floor), sustained warm commands per second, and the RSS of one
# warm sandbox (its helper and hutch init).
# HUTCH_BIN=/path/to/hutch and HUTCH_WARM_DRIVER=/path/to/warm_bench skip
# the release build (e.g. a debug smoke run).
set -eu

runs=200
rounds=5
warmup=5
size=2
root=$(cd "$(dirname "$0")/.." && pwd)
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --warm) size=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -eu/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "warm.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
for tool in hyperfine bwrap python3 cargo; do
    command -v "$tool" >/dev/null || { echo "warm.sh: $tool is not installed" >&2; exit 2; }
done

if [ -n "${HUTCH_BIN:-}" ]; then
    hutch=$HUTCH_BIN
else
    echo "building hutch (release)..." >&2
    hutch=$("$root/benches/hutch-path.sh" --release)
fi
if [ -n "${HUTCH_WARM_DRIVER:-}" ]; then
    driver=$HUTCH_WARM_DRIVER
else
    (cd "$root" && cargo build --release --example warm_bench >&2)
    driver=$(dirname "$hutch")/examples/warm_bench
    [ -x "$driver" ] || driver=$(find "$root/target" -path '*release/examples/warm_bench' -type f | head -1)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/hutch-warm-bench.XXXXXX")
state="$work/state"
mkdir "$work/src" "$work/cwd"
echo x > "$work/src/file"
warm_id=$("$hutch" session --state-dir "$state" create --from "$work/src" --warm "$size")
cold_id=$("$hutch" session --state-dir "$state" create --from "$work/src")
cleanup() {
    "$hutch" session --state-dir "$state" close "$warm_id" >/dev/null 2>&1 || true
    "$hutch" session --state-dir "$state" close "$cold_id" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
cd "$work/cwd"

# Every row must work, and the warm one must be warm, before it is timed.
"$hutch" session --state-dir "$state" run "$warm_id" --status-file "$work/status" -- true
tail -n 1 "$work/status" | grep -q '"warm":true' \
    || { echo "warm.sh: the warm session's command was not served warm" >&2; exit 1; }
"$hutch" run -- true

json="${TMPDIR:-/tmp}/hutch-warm-$(date +%Y%m%d-%H%M%S).json"
per_round=$(( (runs + rounds - 1) / rounds ))
[ "$per_round" -ge 2 ] || per_round=2
round=1
while [ "$round" -le "$rounds" ]; do
    hyperfine --shell=none --warmup "$warmup" --runs "$per_round" --style basic \
        --export-json "$json.$round" \
        --prepare true \
        --prepare "$hutch session --state-dir $state warm $warm_id --ready" \
        --prepare true --prepare true --prepare true --prepare true \
        -n warm "$hutch session --state-dir $state run $warm_id -- true" \
        -n ready "$hutch session --state-dir $state run $warm_id -- true" \
        -n session "$hutch session --state-dir $state run $cold_id -- true" \
        -n hutch "$hutch run -- true" \
        -n bwrap "bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp true" \
        -n start "$hutch --version" \
        >/dev/null
    # The library claim in the same round (its own pool, warmed first).
    "$driver" "$hutch" "$per_round" "$size" > "$json.lib.$round"
    round=$((round + 1))
done

python3 - "$json" "$rounds" <<'PY'
import json, statistics, sys
base, rounds = sys.argv[1], int(sys.argv[2])
times = {}
lib = []
for r in range(1, rounds + 1):
    for res in json.load(open(f"{base}.{r}"))["results"]:
        times.setdefault(res["command"], []).extend(res["times"])
    lib.append(json.load(open(f"{base}.lib.{r}")))
med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
for k in ["warm", "ready", "session", "hutch", "bwrap", "start"]:
    print(f"{k:8} {med[k]:7.2f} ms  ({len(times[k])} runs)")
claim = statistics.median(l["warm_p50_ms"] for l in lib)
b2b = statistics.median(1e3 / l["sustained_per_s"] for l in lib)
print(f"library  {claim:7.2f} ms  claim p50, pool found warm (median of {rounds} rounds)")
print(f"library  {b2b:7.2f} ms  claim back to back (1 / sustained rate)")
print(f"ready/bwrap  {med['ready'] / med['bwrap']:.2f}x  (target <= 0.3x)"
      f"  bound (start + claim p50) / bwrap {(med['start'] + claim) / med['bwrap']:.2f}x")
print(f"warm/bwrap   {med['warm'] / med['bwrap']:.2f}x  (target <= 0.3x)"
      f"  bound (start + claim back to back) / bwrap {(med['start'] + b2b) / med['bwrap']:.2f}x")
print(f"warm/session {med['warm'] / med['session']:.2f}x")
print(f"warm/hutch   {med['warm'] / med['hutch']:.2f}x")
print(f"session run's own work: ready - start - claim p50 = {med['ready'] - med['start'] - claim:.2f} ms,"
      f" warm - start - back-to-back claim = {med['warm'] - med['start'] - b2b:.2f} ms")
PY

echo "library (examples/warm_bench.rs, pool of $size):"
"$driver" "$hutch" "$runs" "$size"
