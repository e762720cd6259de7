#!/usr/bin/env bash
# Which capture mechanism transparent egress uses, measured (docs/egress.md):
# (a) a `local` route for 198.18.0.0/15 via lo + listeners, getsockname()
# for the original destination (what hutch does), against (b) nftables
# REDIRECT (iptables-nft) + SO_ORIGINAL_DST, each in a fresh user-owned
# network namespace, best of RUNS runs of N connections.
#   benches/capture_mechanisms.sh   (env: N=20000 RUNS=3)
# Needs: gcc, unshare (util-linux), ip (iproute2), iptables (nf_tables backend).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
N=${N:-20000}
RUNS=${RUNS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -pthread -o "$work/cm" "$here/capture_mechanisms.c"
setup='ip link set lo up && ip route add local 198.18.0.0/15 dev lo'
best() { sort -n | head -1; }
a=$(for _ in $(seq "$RUNS"); do unshare -Urn sh -c "$setup && $work/cm 443 0 $N" | awk '{print $2}'; done | best)
b=$(for _ in $(seq "$RUNS"); do unshare -Urn sh -c "$setup && iptables -t nat -A OUTPUT -d 198.18.0.0/15 -p tcp -j REDIRECT --to-ports 3129 && $work/cm 3129 1 $N" | awk '{print $2}'; done | best)
echo "== capture, $N connections (best of $RUNS)"
echo "  (a) local route + listener + getsockname   $a us"
echo "  (b) nftables REDIRECT + SO_ORIGINAL_DST     $b us   = $(python3 -c "print('%.2f' % ($b / $a))")x (a)"
