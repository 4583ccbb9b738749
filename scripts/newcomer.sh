#!/usr/bin/env bash
# A newcomer's first hour, replayed: clone this repository's committed HEAD into a temporary
# folder, run the set-up and the demo there, start `airlane serve` on free ports, then run the
# README's quick start and benchmark command and every documented `airlane` example (README.md
# and docs/*.md), each at a smoke size. The first failure stops the walk with the example it
# was replaying, the command it ran and the end of its output.
#
# Each documented command appears below as `example '<the command as documented>'` followed by
# the commands that replay it here (other ports, smaller inputs), or as
# `skip '<the command as documented>' '<why it is not replayed>'`. tests/cli/test_newcomer.py
# checks that every documented command line is one or the other, and runs this script.
#
# Uncommitted changes are not part of the walk: it clones HEAD, as a newcomer would.
# Servers are stopped and the folder removed on every exit (NEWCOMER_KEEP=1 keeps the folder).
# Every command runs under a timeout, and the whole walk under NEWCOMER_TIMEOUT_S (900 s).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
deadline=$((SECONDS + ${NEWCOMER_TIMEOUT_S:-900}))
work=$(mktemp -d "${TMPDIR:-/tmp}/airlane-newcomer.XXXXXX")
server_groups=()
step=0
label="cloning"
last_log=/dev/null

cleanup() {
  local group
  for group in "${server_groups[@]}"; do
    kill -TERM -- "-$group" 2>/dev/null || true
  done
  for group in "${server_groups[@]}"; do
    timeout 10 tail --pid="$group" -f /dev/null 2>/dev/null || kill -KILL -- "-$group" 2>/dev/null || true
  done
  if [ "${NEWCOMER_KEEP:-0}" = 1 ]; then
    echo "newcomer: kept $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  {
    echo "newcomer: FAILED at step $step: $label"
    echo "newcomer: ran: $*"
    echo "newcomer: its output ends with:"
    tail -n 40 "$last_log" | sed 's/^/    /'
  } >&2
  exit 1
}

# The seconds a command may take: its own bound, or what is left of the walk's.
bound() {
  local left=$((deadline - SECONDS))
  [ "$left" -gt 0 ] || fail "(the walk ran past NEWCOMER_TIMEOUT_S)"
  echo $(($1 < left ? $1 : left))
}

# example COMMAND: the documented command the next steps replay.
example() {
  step=$((step + 1))
  label=$1
  echo "newcomer: [$step] $label" >&2
}

# skip COMMAND REASON: a documented command this walk does not replay, and why.
skip() { :; }

# run CMD...: run it (in the clone, stdin closed) within its bound; a non-zero exit fails.
run() {
  last_log="$work/logs/$step.$RANDOM.log"
  timeout --kill-after=5 "$(bound "${RUN_BOUND_S:-180}")" "$@" >"$last_log" 2>&1 </dev/null || fail "$@"
}

# refused TEXT CMD...: the command must fail (exit status 1), saying TEXT.
refused() {
  local text=$1 status=0
  shift
  last_log="$work/logs/$step.$RANDOM.log"
  timeout --kill-after=5 "$(bound 60)" "$@" >"$last_log" 2>&1 </dev/null || status=$?
  [ "$status" = 1 ] || fail "$@" "(expected exit status 1, got $status)"
  expect "$text"
}

# expect TEXT: the last command's output says TEXT.
expect() {
  grep -qF -- "$1" "$last_log" || fail "(its output lacks: $1)"
}

# serve LOG URL CMD...: start a gateway in its own process group; wait (bounded) until URL
# answers /healthz.
serve() {
  local log="$work/logs/$1" url=$2 pid tries=0
  shift 2
  setsid "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  server_groups+=("$pid")
  last_log=$log
  until curl -sf --max-time 2 "$url/healthz" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || fail "$@" "(the gateway exited)"
    tries=$((tries + 1))
    [ "$tries" -lt 150 ] || fail "$@" "(no answer at $url/healthz within 30 s)"
    sleep 0.2
  done
}

# free_ports N: N loopback ports that nothing listens on (held together while choosing).
free_ports() {
  .venv/bin/python - "$1" <<'EOF'
import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for sock in held:
    sock.bind(("127.0.0.1", 0))
print(" ".join(str(sock.getsockname()[1]) for sock in held))
EOF
}

# readme_block TEXT: the README's fenced code block that contains TEXT.
readme_block() {
  .venv/bin/python - "$1" <<'EOF'
import pathlib, re, sys
blocks = re.findall(r"^```\w*\n(.*?)^```", pathlib.Path("README.md").read_text(), re.M | re.S)
print(next(block for block in blocks if sys.argv[1] in block))
EOF
}

# doc_block FILE TEXT: FILE's fenced code block that contains TEXT.
doc_block() {
  .venv/bin/python - "$1" "$2" <<'EOF'
import pathlib, re, sys
blocks = re.findall(r"^```\w*\n(.*?)^```", pathlib.Path(sys.argv[1]).read_text(), re.M | re.S)
print(next(block for block in blocks if sys.argv[2] in block))
EOF
}

mkdir -p "$work/logs"
git clone --quiet --no-checkout "$repo" "$work/airlane"
cd "$work/airlane"
git -c advice.detachedHead=false checkout --quiet --detach "$(git -C "$repo" rev-parse HEAD)"
# The clone runs its own code: nothing of the caller's environment may point elsewhere.
unset PYTHONPATH VIRTUAL_ENV

# -- README: set-up and demo ------------------------------------------------------------------

example './scripts/setup.sh'
started=$SECONDS
RUN_BOUND_S=600 run ./scripts/setup.sh
expect "setup: installing Airlane"  # the quiet first install says what it is doing
echo "newcomer: set-up took $((SECONDS - started)) s" >&2
export PATH="$work/airlane/.venv/bin:$PATH"  # the docs say both `airlane` and .venv/bin/airlane

example './scripts/demo.sh'
run ./scripts/demo.sh --max-tokens 20
expect "streams used:"
expect "TTFT: from sending the request"

skip './scripts/test.sh' 'it is the command that runs this walk (tests/cli/test_newcomer.py)'

# -- README: quick start against a started gateway ---------------------------------------------

read -r port airc_port grpc_port upstream_port artifacts_port rsocket_port <<<"$(free_ports 6)"
url="http://127.0.0.1:$port"

example 'airlane serve'
serve gateway.log "$url" airlane serve --port "$port" --airc-port "$airc_port" --grpc-port "$grpc_port" \
  --rsocket-port "$rsocket_port"

example "curl -N http://127.0.0.1:8420/v1/chat/completions -H 'content-type: application/json' -d '{\"model\": \"any\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stream\": true}'"
run curl -sS -N --max-time 30 "$url/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model": "any", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
expect "data: [DONE]"

example 'airlane stream --prompt "hello"'
run airlane stream --url "$url" --prompt "hello"
expect "last id"

example 'airlane stream --transport ws --prompt "hello"'
run airlane stream --url "$url" --transport ws --prompt "hello"
expect "last id"

example 'python -m pip install openai'
run .venv/bin/python -m pip install --quiet openai
sdk_snippet=$(readme_block "from openai import OpenAI")
run .venv/bin/python -c "${sdk_snippet//127.0.0.1:8420/127.0.0.1:$port}"
[ -s "$last_log" ] || fail "(the SDK snippet printed nothing)"

example 'airlane serve --upstream http://127.0.0.1:8000/v1 --api-key alice=sk-local-123'
upstream_url="http://127.0.0.1:$upstream_port"
# Its upstream is the first gateway (OpenAI-compatible, like the vLLM the README has in mind).
serve upstream.log "$upstream_url" airlane serve --port "$upstream_port" --airc-port -1 --rsocket-port -1 \
  --grpc-port -1 --upstream "$url/v1" --api-key alice=sk-local-123
run airlane stream --url "$upstream_url" --api-key sk-local-123 --prompt "hello"
refused "stream failed" airlane stream --url "$upstream_url" --prompt "hello"

example 'README: the ASGI application snippet'
asgi_snippet=$(readme_block "create_app(Gateway(")
run .venv/bin/python -c "$asgi_snippet
assert callable(app)"

example 'curl -N http://127.0.0.1:8420/v1/streams/$STREAM_ID/events -H "Last-Event-ID: $LAST_ID"'
run curl -sS -N --max-time 30 -D "$work/headers" "$url/v1/chat/completions" \
  -H 'content-type: application/json' \
  -d '{"model": "any", "messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": 10}'
STREAM_ID=$(tr -d '\r' <"$work/headers" | sed -n 's/^x-airlane-stream-id: //Ip')
LAST_ID=$(sed -n 's/^id: //p' "$last_log" | sed -n 3p)
[ -n "$STREAM_ID" ] && [ -n "$LAST_ID" ] || fail "(no stream id or event id in the completion)"
run curl -sS -N --max-time 30 "$url/v1/streams/$STREAM_ID/events" -H "Last-Event-ID: $LAST_ID"
grep -q "^id: $LAST_ID\$" "$last_log" && fail "(the resumed read repeated $LAST_ID)"
expect "id: "

# -- README and docs/benchmark.md: the benchmark, at a smoke size -------------------------------

smoke=(--streams 4 --chunks 10)

example 'airlane bench --spawn --streams 500 --chunks 200 --mode burst --transport both --json bench-results/burst-500.json --plot bench-results/burst-500.png'
run airlane bench --spawn "${smoke[@]}" --mode burst --transport both \
  --json bench-results/burst-500.json --plot bench-results/burst-500.png
[ -s bench-results/burst-500.json ] && [ -s bench-results/burst-500.png ] || fail "(no results)"

example 'airlane bench --spawn --streams 100 --mode burst --transport both --json bench-results/burst-100.json --plot bench-results/burst-100.png'
run airlane bench --spawn "${smoke[@]}" --mode burst --transport both \
  --json bench-results/burst-100.json --plot bench-results/burst-100.png

example 'airlane bench --spawn --streams 500 --mode paced --interval-ms 20 --transport both'
run airlane bench --spawn "${smoke[@]}" --mode paced --interval-ms 20 --transport both

example 'airlane bench --url http://127.0.0.1:8420 --streams 50'
run airlane bench --url "$url" "${smoke[@]}"

example 'airlane bench --spawn --streams 500 --mode paced --transport sse --runs 5 --json bench-results/paced-500-x5.json'
run airlane bench --spawn "${smoke[@]}" --mode paced --transport sse --runs 2 \
  --json bench-results/paced-500-x5.json

example 'airlane bench --spawn --transport all --streams 100'
run airlane bench --spawn "${smoke[@]}" --transport all

example 'airlane bench --url http://127.0.0.1:8420 --airc-url tcp://127.0.0.1:8421 --transport airc --streams 50'
run airlane bench --url "$url" --airc-url "tcp://127.0.0.1:$airc_port" --transport airc "${smoke[@]}"

example 'airlane bench --spawn --streams 500 --mode burst --runs 5'
run airlane bench --spawn "${smoke[@]}" --mode burst --runs 2

example 'airlane bench --spawn --streams 500 --mode paced --runs 5'
run airlane bench --spawn "${smoke[@]}" --mode paced --runs 2

why_compare='needs the reference servers of ./scripts/setup.sh --test (the bench extra and Node.js); tests/cli/test_bench_compare*.py run it'
skip 'airlane bench --compare --streams 20 --chunks 100' "$why_compare"
skip 'airlane bench --peers fastapi,node --streams 20 --chunks 50 --mode paced --interval-ms 20 --transport sse --json bench-results/compare-paced.json' "$why_compare"
skip 'airlane bench --compare --peers aiohttp,picows --streams 500 --mode paced --runs 3 --json bench-results/compare-paced-x3.json --plot bench-results/compare-paced-x3.png' "$why_compare"
skip 'airlane bench --compare --streams 500 --mode burst' "$why_compare"
skip 'airlane bench --compare --peers aiohttp,picows --streams 500 --mode paced --runs 3' "$why_compare"

# -- docs/airc.md, docs/grpc.md and docs/http3.md ---------------------------------------------

example 'airlane stream --transport airc --url tcp://127.0.0.1:8421 --prompt "Hello"'
run airlane stream --transport airc --url "tcp://127.0.0.1:$airc_port" --prompt "Hello"
expect "last id"

example 'airlane stream --transport airc-ws --prompt "Hello"'
run airlane stream --transport airc-ws --url "$url" --prompt "Hello"
expect "last id"

example 'airlane stream --transport grpc --url 127.0.0.1:8422 --prompt "Hello"'
run airlane stream --transport grpc --url "127.0.0.1:$grpc_port" --prompt "Hello"
expect "last id"

example 'airlane stream --transport h3 --prompt "Hello"'
run airlane stream --transport h3 --url "$url" --prompt "Hello"
expect "last id"

example 'airlane stream --transport wt --prompt "Hello"'
run airlane stream --transport wt --url "$url" --prompt "Hello"
expect "last id"

example 'airlane stream --transport rsocket --prompt "Hello"'
run airlane stream --transport rsocket --url "tcp://127.0.0.1:$rsocket_port" --prompt "Hello"
expect "last id"

# -- docs/eventlog.md -------------------------------------------------------------------------

example 'airlane logs create rewards --max-events 1000000'
run airlane logs create rewards --max-events 1000000 --url "$url"

example "echo '{\"episode\": 1, \"reward\": 0.5}' | airlane logs append rewards --type reward.v1"
run bash -c "echo '{\"episode\": 1, \"reward\": 0.5}' | airlane logs append rewards --type reward.v1 --url '$url'"

example "airlane logs append rewards --type reward.v1 --data '{\"episode\": 2, \"reward\": 0.9}'"
run airlane logs append rewards --type reward.v1 --data '{"episode": 2, "reward": 0.9}' --url "$url"

example 'airlane logs read rewards --from-seq 1'
run airlane logs read rewards --from-seq 1 --url "$url"
expect '"episode":2'

example 'airlane logs read rewards --from-time 2026-11-30T05:00:00Z'
run airlane logs read rewards --from-time 2026-11-30T05:00:00Z --url "$url"

example 'airlane logs consume rewards trainers --max 100'
run airlane logs consume rewards trainers --max 100 --url "$url"
expect '"episode":1'

example 'airlane logs consume rewards trainers --no-ack'
run airlane logs append rewards --type reward.v1 --data '{"episode": 3, "reward": 0.1}' --url "$url"
run airlane logs consume rewards trainers --no-ack --url "$url"
token=$(.venv/bin/python -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["token"])' "$last_log")

example "airlane logs ack rewards trainers '<token>'"
run airlane logs ack rewards trainers "$token" --url "$url"

example 'airlane schemas register reward.v1 reward.json'
cat >reward.json <<'EOF'
{"type": "object",
 "properties": {"episode": {"type": "integer"}, "reward": {"type": "number"}},
 "required": ["episode", "reward"]}
EOF
run airlane schemas register reward.v1 reward.json --url "$url"

example "airlane logs append rewards --type reward.v1 --data '{\"episode\": 4}'"
refused "schema_violation" airlane logs append rewards --type reward.v1 --data '{"episode": 4}' --url "$url"

example 'airlane schemas check reward.v1 stricter.json'
cat >stricter.json <<'EOF'
{"type": "object",
 "properties": {"episode": {"type": "integer"}, "reward": {"type": "number"},
                "agent": {"type": "string"}},
 "required": ["episode", "reward", "agent"]}
EOF
# Requiring a new field is not backward compatible: the documented exit status 1, with why.
refused "agent" airlane schemas check reward.v1 stricter.json --url "$url"

example 'airlane schemas compatibility reward.v1 full'
run airlane schemas compatibility reward.v1 full --url "$url"

example 'airlane schemas register rl.Reward reward.desc --protobuf rl.Reward'
cat >reward.proto <<'EOF'
syntax = "proto3";
package rl;
message Reward { int64 episode = 1; double reward = 2; }
EOF
run .venv/bin/python -m grpc_tools.protoc -I. --include_imports --descriptor_set_out reward.desc reward.proto
run airlane schemas register rl.Reward reward.desc --protobuf rl.Reward --url "$url"

why_cluster='needs a NATS JetStream broker (nats-server), which the set-up does not install; tests/cluster/test_nodes.py starts real nodes on one'
skip 'airlane serve --port 8420 --hub nats://127.0.0.1:4222 --node-id a' "$why_cluster"
skip 'airlane serve --port 8520 --hub nats://127.0.0.1:4222 --node-id b' "$why_cluster"
skip 'airlane bench --hub nats://127.0.0.1:4222 --streams 500 --chunks 200' "$why_cluster"
skip 'airlane serve --workers auto' 'its workers share streams through a nats-server it starts, which the set-up does not install; tests/server/test_workers.py runs it with the one the test set-up installs'
skip 'airlane serve --model-dir models/qwen2.5-0.5b-instruct' 'needs a real model directory (a download from the Hugging Face Hub, which this walk does not reach) and the local extra; tests/backends/local serves a tiny model the tests build'
skip 'airlane serve --mqtt mqtt://127.0.0.1:1883' 'needs an MQTT broker on port 1883; tests/mqtt runs the same bridge against a Mosquitto the tests start on a free port'
skip 'airlane serve --waku-port 8645' 'its client is a js-waku light node under Node; tests/waku/test_js_waku.py serves it on a free port (--waku-port 0) and drives it with js-waku'

# -- docs/edge.md: rules ----------------------------------------------------------------------

vibration_sql="SELECT deviceId, avg(vibration) AS avg_v, count(*) AS n FROM 'sensor/+/vibration' GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(vibration) > 3.5"
example 'airlane rules add vibration --sql "SELECT deviceId, avg(vibration) AS avg_v, count(*) AS n FROM '"'"'sensor/+/vibration'"'"' GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(vibration) > 3.5" --action '"'"'{"publish": {"topic": "alerts/{deviceId}", "qos": 1}}'"'"' --action '"'"'{"generate": {"prompt": "Vibration alarm: {row}. What should the operator check?", "result_topic": "advice/{deviceId}"}}'"'"''
run airlane rules add vibration --sql "$vibration_sql" \
  --action '{"publish": {"topic": "alerts/{deviceId}", "qos": 1}}' \
  --action '{"generate": {"prompt": "Vibration alarm: {row}. What should the operator check?", "result_topic": "advice/{deviceId}"}}' \
  --url "$url"
expect '"output_log":"rules.vibration.out"'

example 'airlane rules list'
run airlane rules list --url "$url"
expect '"name":"vibration"'

example 'airlane rules test --sql "SELECT * FROM s WHERE t > 30" samples.jsonl'
printf '{"t": 25}\n{"t": 31}\n' >samples.jsonl
run airlane rules test --sql "SELECT * FROM s WHERE t > 30" samples.jsonl --url "$url"
expect '{"t":31}'

example 'airlane rules delete vibration'
run airlane rules delete vibration --url "$url"

example 'airlane rules add anomalies --qos 1 --sql "SELECT deviceId, avg(vibration) AS v FROM '"'"'sensor/+/vibration'"'"' GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(vibration) > 3.5" --action '"'"'{"generate": {"result_topic": "advice/{deviceId}", "qos": 1}}'"'"''
run airlane rules add anomalies --qos 1 \
  --sql "SELECT deviceId, avg(vibration) AS v FROM 'sensor/+/vibration' GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(vibration) > 3.5" \
  --action '{"generate": {"result_topic": "advice/{deviceId}", "qos": 1}}' --url "$url"

example 'airlane rules add firmware --qos 2 --sql "SELECT deviceId, version FROM '"'"'commands/+/firmware'"'"'" --action '"'"'{"hold": {"timeout_s": 3600}}'"'"' --action '"'"'{"publish": {"topic": "devices/{deviceId}/firmware", "qos": 2}}'"'"''
run airlane rules add firmware --qos 2 --sql "SELECT deviceId, version FROM 'commands/+/firmware'" \
  --action '{"hold": {"timeout_s": 3600}}' \
  --action '{"publish": {"topic": "devices/{deviceId}/firmware", "qos": 2}}' --url "$url"

example 'airlane rules add stop-hot --sql "SELECT machine, temp FROM readings WHERE temp > 90" --action '"'"'{"hold": {"timeout_s": 600}}'"'"' --action '"'"'{"append": {"log": "stops.{machine}"}}'"'"''
run airlane logs create readings --url "$url"
run airlane rules add stop-hot --sql "SELECT machine, temp FROM readings WHERE temp > 90" \
  --action '{"hold": {"timeout_s": 600}}' --action '{"append": {"log": "stops.{machine}"}}' --url "$url"
run airlane logs append readings --type reading --data '{"machine": "m1", "temp": 95}' --url "$url"
run airlane logs append readings --type reading --data '{"machine": "m2", "temp": 97}' --url "$url"

example 'airlane rules approvals stop-hot'
held=0
until [ "$held" = 2 ]; do  # the rule holds both rows within a moment
  run airlane rules approvals stop-hot --url "$url"
  held=$(grep -c '"id"' "$last_log" || true)
  [ "$held" = 2 ] || { [ "$SECONDS" -lt "$deadline" ] || fail "(the rule never held both rows)"; sleep 0.2; }
done
first_id=$(.venv/bin/python -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["id"])' "$last_log")
second_id=$(.venv/bin/python -c 'import json, sys; print(json.loads(open(sys.argv[1]).readlines()[1])["id"])' "$last_log")

example 'airlane rules approve stop-hot 3f2a9c0d1e2b4a5c'
run airlane rules approve stop-hot "$first_id" --url "$url"
expect '"approved":true'

example 'airlane rules reject stop-hot 3f2a9c0d1e2b4a5c'
run airlane rules reject stop-hot "$second_id" --url "$url"
expect '"approved":false'

# -- docs/security.md -------------------------------------------------------------------------

read -r keys_port tls_port tls_airc tls_grpc mesh_port <<<"$(free_ports 5)"

example 'airlane serve --api-key alice=sk-alice-1 --api-key bob=sk-bob-2 --api-key ann@alice=sk-ann-3'
keys_url="http://127.0.0.1:$keys_port"
serve keys.log "$keys_url" airlane serve --port "$keys_port" --airc-port -1 --rsocket-port -1 --grpc-port -1 \
  --api-key alice=sk-alice-1 --api-key bob=sk-bob-2 --api-key ann@alice=sk-ann-3
run curl -sSf --max-time 10 "$keys_url/v1/streams/alice/private/events" \
  -H 'authorization: Bearer sk-alice-1' -H 'content-type: application/json' \
  -d '{"kind": "message", "payload": "mine"}'
run curl -sS --max-time 10 "$keys_url/v1/streams/alice/private" -H 'authorization: Bearer sk-bob-2'
expect "stream_not_found"  # another tenant's stream is not there
run curl -sSf --max-time 10 "$keys_url/v1/streams/alice/private" -H 'authorization: Bearer sk-ann-3'

example 'airlane certs ca --out certs --trust-domain example.org'
run airlane certs ca --out certs --trust-domain example.org

example 'airlane certs issue spiffe://example.org/gateway --ca certs --out certs'
run airlane certs issue spiffe://example.org/gateway --ca certs --out certs

example 'airlane certs issue spiffe://example.org/ai-trainer --ca certs --out certs'
run airlane certs issue spiffe://example.org/ai-trainer --ca certs --out certs

example 'airlane serve --tls-cert certs/gateway.pem --tls-key certs/gateway.key --tls-client-ca certs/ca.pem --trust-domain example.org'
tls_url="https://localhost:$tls_port"
client_cert=(--cacert certs/ca.pem --cert certs/ai-trainer.pem --key certs/ai-trainer.key)
setsid airlane serve --port "$tls_port" --airc-port "$tls_airc" --grpc-port "$tls_grpc" --rsocket-port -1 \
  --tls-cert certs/gateway.pem --tls-key certs/gateway.key --tls-client-ca certs/ca.pem \
  --trust-domain example.org >"$work/logs/tls.log" 2>&1 </dev/null &
server_groups+=("$!")
for _ in $(seq 150); do
  curl -sf --max-time 2 "${client_cert[@]}" "$tls_url/healthz" >/dev/null && break
  sleep 0.2
done
run curl -sS --max-time 10 "${client_cert[@]}" "$tls_url/v1/streams/x"
expect "stream_not_found"  # past the gate, with the client certificate
if curl -sS --max-time 10 --cacert certs/ca.pem "$tls_url/v1/streams/x" >/dev/null 2>&1; then
  fail curl --cacert certs/ca.pem "$tls_url/v1/streams/x" "(served a client with no certificate)"
fi

skip 'airlane serve --jwks https://login.example.org/.well-known/jwks.json --jwt-audience airlane --jwt-issuer https://login.example.org/' 'needs an identity provider; tests/security/test_jwt.py serves a JWKS from a file and a URL, and rotates it'

example 'airlane serve --api-key alice=sk-local-123 --trusted-proxy 10.0.0.0/8 --trust-domain example.org'
mesh_url="http://127.0.0.1:$mesh_port"
serve mesh.log "$mesh_url" airlane serve --port "$mesh_port" --airc-port -1 --rsocket-port -1 --grpc-port -1 \
  --api-key alice=sk-local-123 --trusted-proxy 10.0.0.0/8 --trust-domain example.org
# From 127.0.0.1, not a trusted proxy: the forwarded identity counts for nothing.
run curl -sS --max-time 10 "$mesh_url/v1/streams/x" \
  -H 'x-forwarded-client-cert: URI=spiffe://example.org/ai-trainer'
expect "unauthenticated"

example 'airlane serve --api-key alice=sk-local-123 --audit-log audit.log'
read -r audit_port <<<"$(free_ports 1)"
audit_url="http://127.0.0.1:$audit_port"
serve audited.log "$audit_url" airlane serve --port "$audit_port" --airc-port -1 --rsocket-port -1 --grpc-port -1 \
  --api-key alice=sk-local-123 --audit-log audit.log
run curl -sS --max-time 10 "$audit_url/v1/streams/x" -H 'authorization: Bearer not-the-key'
expect "unauthenticated"
last_log=audit.log
expect '"decision": "deny"'

example 'airlane serve --api-key writer=sk-w-1 --api-key reader=sk-r-2 --policy policy.toml'
doc_block docs/security.md 'name = "the writer key does the rest"' >policy.toml
read -r policy_port <<<"$(free_ports 1)"
policy_url="http://127.0.0.1:$policy_port"
serve policy.log "$policy_url" airlane serve --port "$policy_port" --airc-port -1 --rsocket-port -1 --grpc-port -1 \
  --api-key writer=sk-w-1 --api-key reader=sk-r-2 --policy policy.toml
run curl -sSf --max-time 10 "$policy_url/v1/streams/notes/events" \
  -H 'authorization: Bearer sk-w-1' -H 'content-type: application/json' \
  -d '{"kind": "message", "payload": "from the writer"}'
run curl -sS --max-time 10 "$policy_url/v1/streams/notes/events" \
  -H 'authorization: Bearer sk-r-2' -H 'content-type: application/json' \
  -d '{"kind": "message", "payload": "from the reader"}'
expect "permission_denied"  # the reader key may read, not publish

example 'airlane policy check policy.toml'
run airlane policy check policy.toml
expect "4 rules, 1 identities"

example 'airlane policy explain policy.toml --principal spiffe://example.org/ns/ml/sa/notebook --action logs.append --resource logs/model-updates --method POST'
refused "DENIED: no rule allows logs.append there" airlane policy explain policy.toml \
  --principal spiffe://example.org/ns/ml/sa/notebook --action logs.append \
  --resource logs/model-updates --method POST

# -- docs/artifacts.md ------------------------------------------------------------------------

mkdir artifacts && cd artifacts
# Two versions of a small transformer-shaped checkpoint; the second fine-tunes one layer.
checkpoint() {
  ../.venv/bin/python - "$@" <<'EOF'
import sys
import numpy as np
from safetensors.numpy import save_file
rng = np.random.default_rng(0)
tensors = {"model.embed_tokens.weight": rng.standard_normal((256, 64), dtype=np.float32)}
for layer in range(3):
    tensors[f"model.layers.{layer}.mlp.up_proj.weight"] = rng.standard_normal((128, 64), dtype=np.float32)
    tensors[f"model.layers.{layer}.input_layernorm.weight"] = np.ones(64, np.float32)
if sys.argv[2] == "tuned":
    tensors["model.layers.1.mlp.up_proj.weight"] += np.float32(0.01)
save_file(tensors, sys.argv[1])
EOF
}

example 'airlane artifacts keygen release.pem'
run airlane artifacts keygen release.pem
public_key=$(grep -o 'ed25519:[A-Za-z0-9+/=_-]*' "$last_log" | head -n 1)
[ -n "$public_key" ] || fail "(keygen printed no ed25519:... key)"

example 'airlane artifacts pack model.safetensors --name tiny --version 2 --store store --quantize block32 --shard layer --sign-key release.pem'
for version in 1 2; do
  checkpoint model.safetensors "$([ "$version" = 1 ] && echo base || echo tuned)"
  run airlane artifacts pack model.safetensors --name tiny --version "$version" --store store \
    --quantize block32 --shard layer --sign-key release.pem
done

example 'airlane artifacts inspect store/tiny/2'
run airlane artifacts inspect store/tiny/2

example 'airlane artifacts diff store/tiny/1 store/tiny/2 --out 1-to-2.airdelta'
run airlane artifacts diff store/tiny/1 store/tiny/2 --out 1-to-2.airdelta
[ -s 1-to-2.airdelta ] || fail "(no delta file)"

example 'airlane artifacts serve store --port 8420'
artifacts_url="http://127.0.0.1:$artifacts_port"
serve artifacts.log "$artifacts_url" airlane artifacts serve store --port "$artifacts_port"

example 'airlane artifacts pull http://127.0.0.1:8420 tiny --dest models --key ed25519:...'
run airlane artifacts pull "$artifacts_url" tiny --version 1 --dest models --key "$public_key" --quiet
run airlane artifacts pull "$artifacts_url" tiny --dest models --key "$public_key" --quiet
expect "signature by"

example 'airlane artifacts verify models/tiny/current --key ed25519:...'
run airlane artifacts verify models/tiny/current --key "$public_key"

example 'airlane artifacts rollback models tiny'
run airlane artifacts rollback models tiny
expect "tiny: 1 is current"

example 'airlane artifacts apply 1-to-2.airdelta store/tiny/1 rebuilt/'
run airlane artifacts apply 1-to-2.airdelta store/tiny/1 rebuilt/
cd ..

echo "newcomer: all $step steps passed in $SECONDS s" >&2
