#!/bin/sh
# Spawn latency: `hutch run -- true` against bubblewrap and unshare(1).
#
#   benches/spawn.sh [--runs N] [--warmup N] [--hutch "ARGS"]... [--row NAME=CMD]... [--check]
#
# Builds hutch in release mode, then runs every row in ONE hyperfine
# invocation (no intermediate shell: --shell=none), exports the raw results
# as JSON ($TMPDIR/hutch-spawn-<date>.json, or $HUTCH_BENCH_JSON), and
# prints the median per-spawn time of each row and the ratio of every hutch
# row to bwrap. The target is hutch <= 0.5 x bwrap.
#
# Rows always run: `hutch run -- true` (default profile, cwd = a fresh
# temporary directory), bwrap and unshare. Extra rows:
#   --hutch "--seccomp default"     adds `hutch run --seccomp default -- true`
#   --row "name=cmd args"           adds an arbitrary command
# HUTCH_BIN=/path/to/hutch skips the build and times that binary.
# --check exits 1 when a hutch row is slower than 0.5 x bwrap (default: 0,
# it is a benchmark, not a test).
set -eu

runs=200
warmup=20
check=0
extra_names=""   # newline-separated, parallel to extra_cmds
extra_cmds=""
nl='
'
root=$(cd "$(dirname "$0")/.." && pwd)

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --hutch) extra_names="$extra_names${nl}hutch $2"
                 extra_cmds="$extra_cmds${nl}HUTCH run $2 -- true"; shift 2 ;;
        --row) extra_names="$extra_names${nl}${2%%=*}"
               extra_cmds="$extra_cmds${nl}${2#*=}"; shift 2 ;;
        --check) check=1; shift ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
    (cd "$root" && cargo build --release --quiet --bin hutch)
    target_dir=$(cd "$root" && cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    hutch="$target_dir/release/hutch"
fi

# hutch overlays its cwd: give it a fresh, empty directory.
work=$(mktemp -d "${TMPDIR:-/tmp}/hutch-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cd "$work"

# Every row must work before it is timed.
"$hutch" run -- true || { echo "spawn.sh: \`hutch run -- true\` fails here (see above)" >&2; exit 1; }

json=${HUTCH_BENCH_JSON:-${TMPDIR:-/tmp}/hutch-spawn-$(date +%Y%m%d-%H%M%S).json}
mkdir -p "$(dirname "$json")"

set -- hyperfine --shell=none --warmup "$warmup" --runs "$runs" --export-json "$json" --style basic \
    -n "hutch" "$hutch run -- true" \
    -n "bwrap" "bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp true" \
    -n "unshare" "unshare -Urmpiuf --mount-proc true"
if [ -n "$extra_names" ]; then
    i=1
    while :; do
        name=$(printf '%s\n' "$extra_names" | sed -n "$((i + 1))p")
        cmd=$(printf '%s\n' "$extra_cmds" | sed -n "$((i + 1))p")
        [ -n "$name" ] || break
        cmd=$(printf '%s' "$cmd" | sed "s|^HUTCH |$hutch |")
        set -- "$@" -n "$name" "$cmd"
        i=$((i + 1))
    done
fi
"$@" >&2

python3 - "$json" "$check" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
check = sys.argv[2] == "1"
by_name = {r["command"]: r for r in results}
bwrap = by_name["bwrap"]["median"]
print(f"{'row':28} {'median':>10} {'mean':>10} {'stddev':>9}  vs bwrap")
slow = []
for r in results:
    ratio = r["median"] / bwrap
    print(f"{r['command']:28} {r['median']*1e3:8.2f}ms {r['mean']*1e3:8.2f}ms {r['stddev']*1e3:7.2f}ms  {ratio:5.2f}x")
    if r["command"].startswith("hutch") and ratio > 0.5:
        slow.append(f"{r['command']} ({ratio:.2f}x)")
print(f"target: hutch <= 0.50x bwrap; {'MISSED by ' + ', '.join(slow) if slow else 'met'}")
print(f"raw results: {sys.argv[1]}")
sys.exit(1 if check and slow else 0)
PY
