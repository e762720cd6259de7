#!/bin/sh
# hutch's seccomp BPF generator against the seccompiler-based compiler it
# replaced (kept as the test oracle, tests/confine_support/), for every
# built-in profile and the init filter: compiling the profile, and
# installing the program (one seccomp(SECCOMP_SET_MODE_FILTER) in a forked
# child: the kernel checks, converts and JITs it and builds its action
# cache).
#
#   benches/seccomp_codegen.sh [--runs N] [--rounds N]
#
# Builds the driver, examples/seccomp_codegen_bench.rs, in release mode
# (HUTCH_SECCOMP_DRIVER=/path/to/seccomp_codegen_bench skips the build,
# e.g. for a debug smoke run) and runs it: --runs compiles and installs
# of each program (default 200) in --rounds rounds (default 5), the two
# compilers alternating in each round so that machine load hits both
# alike. Prints each program's instruction counts, the median compile and
# install time of each compiler, and the ratio hutch / seccompiler (over
# all rounds, and the range of the per-round ratios). This was a timing
# test in tests/confine_codegen.rs; the test keeps checking that the
# kernel accepts every program. A benchmark, not a test: exit 0 unless the
# driver fails.
set -eu

runs=200
rounds=5
root=$(cd "$(dirname "$0")/.." && pwd)

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -eu/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "seccomp_codegen.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ -n "${HUTCH_SECCOMP_DRIVER:-}" ]; then
    driver=$HUTCH_SECCOMP_DRIVER
else
    for tool in cargo python3; do
        command -v "$tool" >/dev/null || { echo "seccomp_codegen.sh: $tool is not installed" >&2; exit 2; }
    done
    echo "building the driver (release)..." >&2
    # Wherever the build target in .cargo/config.toml puts it.
    driver=$(cd "$root" && cargo build --quiet --release --example seccomp_codegen_bench \
            --message-format=json-render-diagnostics |
        python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == "seccomp_codegen_bench":
        print(m["executable"])
')
    [ -n "$driver" ] || { echo "seccomp_codegen.sh: the driver did not build (see above)" >&2; exit 1; }
fi

"$driver" "$runs" "$rounds"
