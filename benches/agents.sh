#!/usr/bin/env bash
# Agent CLI benchmark (not a timed test; issue 32): one scripted tool-call
# exchange (the model asks for a shell command, the CLI runs it, sends the
# result, the model ends) with each real CLI against the fake model server
# (examples/fake_model.rs, HTTPS on loopback), measured in the same run:
#
#   direct   the CLI on the host, no sandbox (as uid 65534: Claude Code
#            refuses to skip its prompts as root), its configuration by hand,
#            its HOME kept from run to run (warm: the CLI's state exists)
#   direct, fresh HOME
#            the same with an empty HOME on a tmpfs before each run (as
#            every hutch row has): what the CLI's first-run setup of its
#            state costs anywhere (Codex 0.171 creates six SQLite
#            databases and writes its bundled skills into ~/.codex)
#   run      `hutch run` with that configuration as flags (uid, env, CA,
#            the model's host on the allow-list)
#   agent    `hutch run --agent NAME` (the profile: uid, HOME tmpfs with the
#            CLI's configuration files, env, allow-list, limits, and the
#            key through the model-API gateway: plain HTTP inside, TLS and
#            the key added on the host)
#   run, warm HOME
#            `hutch run` as uid 65534 with a HOME bound in and kept from run
#            to run, as the direct row's: hutch's own cost at equal state
#
#   benches/agents.sh          (env: RUNS=10 AGENTS="claude-code codex")
#
# Prints mean ± stddev per row and the ratios the targets are stated in
# (hutch adds <= 10 %): at equal state, run / direct-fresh-HOME and
# run-warm-HOME / direct; and run / direct, a fresh sandbox HOME against
# a warm host HOME (what a caller sees: the CLI's first-run setup on top,
# docs/agents.md, "Performance"); agent - run (what the profile's setup
# costs over plain `hutch run`). The CLIs come from tests/setup
# (/opt/hutch-test-agents); needs hyperfine (tests/setup) and a release
# build of hutch (made here; HUTCH_BIN=/path/to/hutch times that binary).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
RUNS=${RUNS:-10}
AGENTS=${AGENTS:-"claude-code codex"}
agents_dir=/opt/hutch-test-agents
claude=$agents_dir/claude-code-2.1.332/node_modules/.bin/claude
codex=$agents_dir/codex-0.171.0/node_modules/.bin/codex
for b in "$claude" "$codex"; do
    [ -x "$b" ] || { echo "$b is missing: run tests/setup" >&2; exit 1; }
done
command -v hyperfine >/dev/null || { echo "hyperfine is missing: run tests/setup" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (the direct rows drop to uid 65534 with setpriv)" >&2; exit 1; }

if [ -n "${HUTCH_BIN:-}" ]; then
    hutch=$(realpath "$HUTCH_BIN")
else
    hutch=$("$here/hutch-path.sh" --release)
fi
(cd "$root" && cargo build --quiet --example fake_model)
server_bin=$(cd "$root" && cargo build --quiet --example fake_model --message-format=json |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="fake_model" and m.get("executable"): print(m["executable"])')

work=$(mktemp -d)
chmod 755 "$work"
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    umount "$work/fresh" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# The server runs until its stdin closes: a fifo held open by this script.
mkfifo "$work/hold"
"$server_bin" "$work/ca.pem" 'echo bench > foo.txt; echo done' 'Finished.' \
    < "$work/hold" > "$work/ports" 2>/dev/null &
server_pid=$!
exec 9>"$work/hold"
for _ in $(seq 200); do [ -s "$work/ports" ] && break; sleep 0.05; done
port=$(sed 's/.*https=\([0-9]*\).*/\1/' "$work/ports")
[ -n "$port" ] || { echo "the fake model server did not start" >&2; exit 1; }
base=https://model.test:$port

# The host side of the direct rows: a writable HOME and working directory
# for uid 65534, the name resolved by /etc/hosts is not needed (localhost).
mkdir -p "$work/repo" "$work/home/.claude" "$work/home/.codex" "$work/fresh"
echo '{"permissions": {"defaultMode": "bypassPermissions"}}' > "$work/home/.claude/settings.json"
# The fresh-HOME row's template (the CLIs' settings, no state), copied onto
# a tmpfs before each run, and the warm-HOME hutch row's own kept HOME.
cp -a "$work/home" "$work/home-template"
cp -a "$work/home" "$work/home-run"
chown -R 65534:65534 "$work/repo" "$work/home" "$work/home-template" "$work/home-run"
chmod 644 "$work/ca.pem"
mount -t tmpfs -o mode=0755 hutch-bench-home "$work/fresh"
fresh_home="rm -rf $work/fresh/home && cp -a $work/home-template $work/fresh/home"
# LANG as in every sandbox (hutch's default environment): with it each glibc
# program the CLI runs loads the C.UTF-8 locale (~0.15 ms an exec).
direct="cd $work/repo && setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME=$work/home"
direct_fresh="cd $work/repo && setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME=$work/fresh/home"
egress="--allow-host model.test:$port --resolve model.test=127.0.0.1 --allow-address 127.0.0.1/32 --ro-bind $work/ca.pem /tmp/model-ca.pem"
sandbox="cd $work/repo && $hutch run --quiet --workspace $work/repo --timeout 120s $egress"
sandbox_warm="$sandbox --uid 65534 --gid 65534 --bind $work/home-run /home/bench --setenv HOME /home/bench"
# The same with variables in hutch's own environment (the profiles' secrets
# read the key there; the gateway trusts the test CA through SSL_CERT_FILE).
sandbox_with() { echo "cd $work/repo && $1 $hutch run --quiet --workspace $work/repo --timeout 120s $egress"; }

rows=()
for agent in $AGENTS; do
    case $agent in
        claude-code)
            key="ANTHROPIC_API_KEY sk-bench"
            cli="$claude -p 'create foo.txt'"
            direct_env="ANTHROPIC_API_KEY=sk-bench ANTHROPIC_BASE_URL=https://localhost:$port NODE_EXTRA_CA_CERTS=$work/ca.pem CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 $cli"
            direct_cmd="$direct $direct_env"
            fresh_cmd="$direct_fresh $direct_env"
            run_flags="--setenv $key --setenv ANTHROPIC_BASE_URL $base --setenv NODE_EXTRA_CA_CERTS /tmp/model-ca.pem --setenv CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC 1 -- $cli --dangerously-skip-permissions"
            run_cmd="$sandbox --uid 1000 --gid 1000 $run_flags"
            warm_cmd="$sandbox_warm $run_flags"
            # The profile's gateway and secret, pointed at the fake model:
            # the key from hutch's environment, the CA in hutch's trust.
            agent_cmd="$(sandbox_with "ANTHROPIC_API_KEY=sk-bench SSL_CERT_FILE=$work/ca.pem") --agent claude-code --gateway name=anthropic,upstream=$base,env=ANTHROPIC_BASE_URL --secret name=anthropic,from-env=ANTHROPIC_API_KEY,host=model.test:$port,env=ANTHROPIC_API_KEY,inject=header:x-api-key -- $cli"
            ;;
        codex)
            key="OPENAI_API_KEY sk-bench"
            provider="model_providers.b={name=\"b\",base_url=\"URL/v1\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}"
            flags="exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check -c model_provider=b -c analytics.enabled=false -c features.plugins=false"
            direct_env="OPENAI_API_KEY=sk-bench SSL_CERT_FILE=$work/ca.pem $codex $flags -c '${provider/URL/https://localhost:$port}' 'create foo.txt'"
            direct_cmd="$direct $direct_env"
            fresh_cmd="$direct_fresh $direct_env"
            run_flags="--setenv $key --setenv SSL_CERT_FILE /tmp/model-ca.pem -- $codex $flags -c '${provider/URL/$base}' 'create foo.txt'"
            run_cmd="$sandbox --uid 1000 --gid 1000 $run_flags"
            warm_cmd="$sandbox_warm $run_flags"
            agent_cmd="$(sandbox_with "OPENAI_API_KEY=sk-bench SSL_CERT_FILE=$work/ca.pem") --agent codex --gateway name=openai,upstream=$base --secret name=openai,from-env=OPENAI_API_KEY,host=model.test:$port,env=OPENAI_API_KEY,inject=bearer -- $codex exec --skip-git-repo-check 'create foo.txt'"
            ;;
        *) echo "unknown agent $agent" >&2; exit 1 ;;
    esac
    # Each command must complete the exchange before it is timed.
    for c in "$direct_cmd" "$fresh_home && $fresh_cmd" "$run_cmd" "$warm_cmd" "$agent_cmd"; do
        out=$(bash -c "$c" 2>&1 < /dev/null) || { echo "$agent: failed: $c"$'\n'"$out" >&2; exit 1; }
        grep -q Finished. <<<"$out" || { echo "$agent: no final text from: $c"$'\n'"$out" >&2; exit 1; }
    done
    # One --prepare per command, in order: only the fresh-HOME row's
    # resets its HOME (outside the timing).
    hyperfine --runs "$RUNS" --warmup 1 --style basic --export-json "$work/$agent.json" \
        --prepare true --prepare "$fresh_home" --prepare true --prepare true --prepare true \
        -n "$agent direct" "$direct_cmd < /dev/null" \
        -n "$agent direct fresh HOME" "$fresh_cmd < /dev/null" \
        -n "$agent run" "$run_cmd < /dev/null" \
        -n "$agent run warm HOME" "$warm_cmd < /dev/null" \
        -n "$agent agent" "$agent_cmd < /dev/null" > "$work/$agent.log"
    rows+=("$work/$agent.json")
done

python3 - "${rows[@]}" <<'EOF'
import json, sys
print(f"{'row':<32}{'mean ms':>10}{'stddev':>9}{'user+sys ms':>13}")
for f in sys.argv[1:]:
    r = {x["command"]: x for x in json.load(open(f))["results"]}
    names = list(r)
    for n in names:
        cpu = (r[n]["user"] + r[n]["system"]) * 1000
        print(f"{n:<32}{r[n]['mean']*1000:>10.1f}{r[n]['stddev']*1000:>9.1f}{cpu:>13.1f}")
    d, fresh, run, warm, agent = (r[n]["mean"] for n in names)
    print(f"  equal state, fresh HOME: run / direct fresh HOME: {run/fresh:.3f}  (target <= 1.10)")
    print(f"  equal state, warm HOME: run warm HOME / direct: {warm/d:.3f}  (target <= 1.10)")
    print(f"  fresh sandbox HOME vs warm host HOME: run / direct: {run/d:.3f}, agent / direct: {agent/d:.3f}")
    print(f"  --agent - run: {(agent-run)*1000:+.1f} ms (the profile's setup)")
EOF
