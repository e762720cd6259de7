#!/bin/sh
# OCI runtime cost (issue 16): the same bundle (a busybox rootfs, `true`,
# the config `runc spec` writes) through create + start + wait + delete
# (`RUNTIME run`, which is exactly that) with hutch-oci, crun and runc,
# interleaved in one hyperfine run; then `podman run --rm IMAGE true` with
# each runtime. Prints hyperfine's summary and the median per command.
# Then the CRI row (issue 37): a pod's life through containerd's CRI plugin
# (RunPodSandbox + Create/Start of one container + StopPodSandbox +
# RemovePodSandbox) with the `hutch` runtime handler against `runc`,
# interleaved on one containerd (examples/cri_bench.rs, tests/cri/).
# Target: hutch-oci <= crun (the fastest peer). A runtime that fails on
# this host is shown with its error and left out of the timing.
#
#   benches/oci.sh [--runs N]
#
# HUTCH_OCI=/path/to/hutch-oci skips the build. Run as root on a quiet
# machine (the lead runs benchmarks, not the tests).
set -eu

runs=50
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "oci.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
for tool in hyperfine runc crun podman python3 /bin/busybox; do
    command -v "$tool" >/dev/null 2>&1 || { echo "oci.sh: $tool is needed" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
if [ -z "${HUTCH_OCI:-}" ]; then
    cargo build --release --bin hutch-oci >&2
    HUTCH_OCI=$PWD/target/x86_64-unknown-linux-gnu/release/hutch-oci
fi

work=$(mktemp -d /tmp/hutch-oci-bench.XXXXXX)
trap 'podman --root "$work/storage" --runroot "$work/run" rmi -a -f >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
bundle=$work/bundle
mkdir -p "$bundle/rootfs/bin"
cp /bin/busybox "$bundle/rootfs/bin/"
for a in sh true; do ln -s busybox "$bundle/rootfs/bin/$a"; done
(cd "$bundle" && runc spec)
python3 - "$bundle/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["process"]["terminal"] = False
c["process"]["args"] = ["true"]
json.dump(c, open(sys.argv[1], "w"))
EOF

# The median of each command and its ratio to hutch-oci's.
medians() { # HYPERFINE-JSON
    python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
base = r[0]["median"]
for x in r:
    print(f"median {x['command']}: {x['median'] * 1000:.1f} ms ({x['median'] / base:.2f}x {r[0]['command']})")
EOF
}

# A unique id per run: each command gets its own counter file.
run_cmd() { # NAME BINARY
    echo "n=\$(cat $work/$1.n 2>/dev/null || echo 0); echo \$((n+1)) > $work/$1.n; $2 --root $work/$1-state run --bundle $bundle $1-\$n"
}
# One probe run each: a runtime that cannot run the bundle on this host
# (crun on a hybrid v1 cgroup layout) is shown with its error and left out
# of the timing, instead of aborting the comparison.
set --
for rt in "hutch-oci:$HUTCH_OCI" crun:crun runc:runc; do
    name=${rt%%:*} bin=${rt#*:}
    if out=$($bin --root "$work/probe-state" run --bundle "$bundle" "probe-$name" 2>&1); then
        set -- "$@" -n "$name" "$(run_cmd "$name" "$bin")"
    else
        echo "oci.sh: $name cannot run the bundle here, left out: $(echo "$out" | tail -1)"
        $bin --root "$work/probe-state" delete --force "probe-$name" >/dev/null 2>&1 || true
    fi
done
hyperfine --warmup 5 --runs "$runs" -S sh --export-json "$work/bundle.json" "$@"
medians "$work/bundle.json"

tar -C "$bundle/rootfs" -cf "$work/rootfs.tar" .
p="podman --root $work/storage --runroot $work/run --storage-driver vfs --cgroup-manager cgroupfs --events-backend file"
$p import -q "$work/rootfs.tar" localhost/hutch-oci-bench:latest >/dev/null
flags="--rm --network none --pids-limit 0 --ulimit nofile=1024:1024 --ulimit nproc=4096:4096"
set --
for rt in "hutch-oci:$HUTCH_OCI" crun:crun runc:runc; do
    name=${rt%%:*} bin=${rt#*:}
    cmd="$p --runtime $bin run $flags localhost/hutch-oci-bench true"
    if out=$($cmd 2>&1); then
        set -- "$@" -n "podman $name" "$cmd"
    else
        echo "oci.sh: podman with $name fails here, left out: $(echo "$out" | tail -1)"
    fi
done
hyperfine --warmup 2 --runs "$((runs / 5 + 1))" --export-json "$work/podman.json" "$@"
medians "$work/podman.json"

# The CRI row: its own containerd (under $TMPDIR, in a network namespace of
# its own), runs/5+1 pods per handler, interleaved. The driver is the CRI
# client only (a debug build is fine); the runtimes are the ones measured.
if command -v containerd >/dev/null 2>&1 && command -v containerd-shim-runc-v2 >/dev/null 2>&1; then
    cargo build --features tokio --example cri_bench >&2
    target/x86_64-unknown-linux-gnu/debug/examples/cri_bench "$HUTCH_OCI" "$((runs / 5 + 1))"
else
    echo "oci.sh: containerd and its runc shim are needed for the CRI row, left out"
fi
