#!/usr/bin/env bash
# Transparent-egress rows of the egress benchmark (benches/proxy.sh runs
# this at its end; it also runs alone). Everything is measured from inside
# one `hutch run --egress-mode transparent` sandbox, against the CONNECT
# door of the same sandbox in the same run:
#   - bulk throughput of SIZE_MB MiB by name (captured) vs through CONNECT
#     (target >= 0.95x CONNECT);
#   - connection setup by name, including the DNS answer (getaddrinfo asks
#     the resolver every time) and the upstream connect, vs CONNECT setup
#     (target <= 1.5x CONNECT);
#   - the DNS answer latency of hutch's resolver vs dnsmasq answering the
#     same kind of query from its cache on the host's loopback.
#   benches/proxy_transparent.sh   (env: SIZE_MB=1024 RUNS=3 SETUPS=2000 QUERIES=20000)
# Needs: python3, gcc, dnsmasq (apt dnsmasq-base), a release build (made here).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
SIZE_MB=${SIZE_MB:-1024}
RUNS=${RUNS:-3}
SETUPS=${SETUPS:-2000}
QUERIES=${QUERIES:-20000}
size=$((SIZE_MB * 1024 * 1024))
py="python3 $here/proxy_bench.py"
command -v dnsmasq >/dev/null || { echo "dnsmasq is not installed (apt-get install dnsmasq-base)" >&2; exit 1; }
hutch=$("$here/hutch-path.sh" --release)

work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
wait_file() { for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.05; done; echo "timeout waiting for $1" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ratio() { python3 -c "print('%.2f' % ($1 / $2))"; }
best() { sort -n | head -1; }

gcc -O2 -o "$work/tb" "$here/transparent_bench.c"
# The sandbox sees its workspace (the directory hutch runs in), not the
# host's /tmp: everything it runs lives there.
cp "$here/proxy_bench.py" "$work/"
$py serve-bulk "$work/bulk.port" "$size" & pids+=($!)
$py serve-greet "$work/greet.port" & pids+=($!)
wait_file "$work/bulk.port"; wait_file "$work/greet.port"
bulk_port=$(cat "$work/bulk.port"); greet_port=$(cat "$work/greet.port")

dport=$(free_port)
dnsmasq -k -C /dev/null -p "$dport" --listen-address=127.0.0.1 --bind-interfaces --no-resolv --no-hosts \
    --host-record=bench.test,192.0.2.10 --log-facility=/dev/null & pids+=($!)
for _ in $(seq 100); do "$work/tb" dns 127.0.0.1 "$dport" bench.test 1 >/dev/null 2>&1 && break; sleep 0.05; done

inpy="python3 $work/proxy_bench.py"
cat >"$work/inside.sh" <<IN
set -eu
for i in \$(seq $RUNS); do
    echo "bulk connect \$($inpy bulk 127.0.0.1:3128 bulk.test $bulk_port $size)"
    echo "bulk transparent \$($inpy bulk direct bulk.test $bulk_port $size)"
done
for i in 1 2 3; do
    echo "setup connect \$($work/tb setup connect greet.test $greet_port $SETUPS)"
    echo "setup transparent \$($work/tb setup transparent greet.test $greet_port $SETUPS)"
    echo "dns hutch \$($work/tb dns 127.0.0.1 53 greet.test $QUERIES)"
done
IN
out=$(cd "$work" && "$hutch" run --quiet --egress-mode transparent \
    --allow-host "bulk.test:$bulk_port" --allow-host "greet.test:$greet_port" \
    --resolve bulk.test=127.0.0.1 --resolve greet.test=127.0.0.1 --allow-address 127.0.0.1 \
    --timeout none -- sh "$work/inside.sh")
dnsmasq_us=$(for _ in 1 2 3; do "$work/tb" dns 127.0.0.1 "$dport" bench.test "$QUERIES"; done | best)

pick() { awk -v a="$1" -v b="$2" '$1 == a && $2 == b {print $3}' <<<"$out" | best; }
rate() { python3 -c "print('%.0f' % ($size / $1 / 1048576))"; }
bc=$(rate "$(pick bulk connect)"); bt=$(rate "$(pick bulk transparent)")
sc=$(pick setup connect); st=$(pick setup transparent); dh=$(pick dns hutch)
echo "== transparent egress (inside one sandbox; best of $RUNS bulk runs, of 3 setup/DNS runs)"
printf "  bulk %d MiB   CONNECT %6s MiB/s   by name %6s MiB/s   = %sx   (target >= 0.95)\n" "$SIZE_MB" "$bc" "$bt" "$(ratio "$bt" "$bc")"
printf "  setup        CONNECT %6s us      by name %6s us      = %sx   (target <= 1.50; by name includes the DNS answer)\n" "$sc" "$st" "$(ratio "$st" "$sc")"
printf "  DNS answer   dnsmasq %6s us      hutch   %6s us      = %sx\n" "$dnsmasq_us" "$dh" "$(ratio "$dh" "$dnsmasq_us")"
