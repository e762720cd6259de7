#!/usr/bin/env bash
# TLS interception's cost (not a timed test; issue 31's Performance rows):
# requests to one local HTTPS server (test CA), each on a new connection,
# measured in the same run
#   - direct TLS from the host (the baseline),
#   - from a sandbox through an opaque CONNECT tunnel (a host not listed
#     in `intercept`),
#   - from a sandbox through interception: the first request to each host
#     (its leaf is minted) and the later ones (leaf cached).
#
#   benches/proxy_intercept.sh      (env: HOSTS=20 REPEAT=10, BUILD=--release)
#
# The client is Python's http.client (the same in every row); medians and
# the differences are what to read, not the absolute figures.
# Needs: python3, openssl; a build of hutch (release unless BUILD= is empty).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
HOSTS=${HOSTS:-20}
REPEAT=${REPEAT:-10}
BUILD=${BUILD---release}
hutch=$("$here/hutch-path.sh" $BUILD)
work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

names=$(seq -f 'h%g.test' 1 "$HOSTS" | paste -sd,)
opaque=$(seq -f 'o%g.test' 1 "$HOSTS" | paste -sd,)
san=$(echo "$names,$opaque" | tr ',' '\n' | sed 's/^/DNS:/' | paste -sd,)

# The upstream's CA and certificate (every name).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=bench upstream CA" -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=bench" \
    -keyout "$work/srv.key" -out "$work/srv.csr" 2>/dev/null
printf 'subjectAltName=%s\n' "$san" >"$work/ext"
openssl x509 -req -in "$work/srv.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -CAcreateserial -days 2 -extfile "$work/ext" -out "$work/srv.pem" 2>/dev/null
chmod 644 "$work"/*

python3 "$here/intercept_bench.py" serve "$work/srv.pem" "$work/srv.key" "$work/port" & pids+=($!)
for _ in $(seq 200); do [ -s "$work/port" ] && break; sleep 0.05; done
port=$(cat "$work/port")

{
    echo '[profiles.bench]'
    printf 'allow = [%s]\n' "$(echo "$names,$opaque" | tr ',' '\n' | sed "s/.*/\"&:$port\"/" | paste -sd,)"
    echo 'allow_address = ["127.0.0.1/32"]'
    printf 'resolve = { %s }\n' "$(echo "$names,$opaque" | tr ',' '\n' | sed 's/.*/"&" = "127.0.0.1"/' | paste -sd,)"
    for n in $(echo "$names" | tr ',' ' '); do
        printf '[[profiles.bench.intercept]]\nhost = "%s:%s"\n' "$n" "$port"
    done
} >"$work/policy.toml"
cp "$here/intercept_bench.py" "$work/"

direct=$(SSL_CERT_FILE="$work/ca.pem" python3 "$here/intercept_bench.py" client direct "$port" "$names" "$REPEAT")
sandboxed=$(SSL_CERT_FILE="$work/ca.pem" "$hutch" run --quiet --egress-policy "$work/policy.toml" \
    --workspace "$work" -- sh -c "python3 $work/intercept_bench.py client proxy $port $opaque $REPEAT; \
        python3 $work/intercept_bench.py client proxy $port $names $REPEAT")

python3 - "$direct" "$sandboxed" "$HOSTS" "$REPEAT" <<'EOF'
import json, statistics, sys
direct = json.loads(sys.argv[1])
opaque, inter = (json.loads(l) for l in sys.argv[2].splitlines())
med = statistics.median
d = med(direct["first"] + direct["later"])
rows = [
    ("direct TLS (host, new connection each)", d),
    ("opaque CONNECT tunnel (not intercepted)", med(opaque["first"] + opaque["later"])),
    ("intercepted, first request per host (leaf minted)", med(inter["first"])),
    ("intercepted, later requests (leaf cached)", med(inter["later"])),
]
print(f"TLS interception ({sys.argv[3]} hosts x (1 + {sys.argv[4]}) requests, p50, ms):")
for name, v in rows:
    print(f"  {name:52s} {v:7.2f}  ({v - d:+.2f} vs direct)")
print(f"  leaf minting, first minus cached request:            {med(inter['first']) - med(inter['later']):7.2f}")
EOF
