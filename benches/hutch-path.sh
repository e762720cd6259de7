#!/bin/sh
# Build the hutch binary and print its path (wherever the build target in
# .cargo/config.toml puts it). Used by the benchmarks and tests/kernel/run.
#
#   benches/hutch-path.sh [--release]
set -eu
cd "$(dirname "$0")/.."
cargo build --quiet "$@" --bin hutch --message-format=json-render-diagnostics |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == "hutch":
        print(m["executable"])
'
