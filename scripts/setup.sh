#!/usr/bin/env bash
# Create .venv and install Airlane into it. With --test, also install the test tools, the
# reference servers `airlane bench --compare` measures (the `bench` extra, and the Node peer's
# packages when Node.js is here), and the Debian packages the test suite drives (Chromium for
# the browser tests). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Airlane needs Python 3.11 or newer (found: $("$python" --version 2>&1))" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
# The stamp records what was installed (its name carries the extras, so changing them
# reinstalls), so a second run with unchanged pyproject is instant.
extras=$([ "$want_test" = 1 ] && echo "[test,bench,webrtc,local]" || echo "")
stamp=".venv/.airlane-installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # Quiet pip, so say what is happening: the first install takes half a minute or more.
  echo "setup: installing Airlane and its dependencies$([ -n "$extras" ] && echo " with the test and benchmark tools") into .venv (about a minute the first time)..." >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".$extras"
  touch "$stamp"
  echo "setup: installed" >&2
fi
# airlane.v1 is generated from proto/ by grpcio-tools (it is never committed); this is a
# no-op when the .proto files have not changed.
.venv/bin/python -m airlane.v1
# Byte-compile the editable install's sources: where PYTHONDONTWRITEBYTECODE is set (some CI
# and container images), nothing caches them otherwise, and every `airlane` command and
# gateway the tests start would compile ~190 modules again (0.5-1 s each). compileall skips
# what is up to date, and Python ignores a .pyc whose source has changed since.
.venv/bin/python -m compileall -q src >/dev/null

# amqtt, the MQTT bridge tests' second broker (tests/mqtt/test_second_broker.py), in an
# environment of its own: it pins websockets==15.0.1, which would hold Airlane's back.
if [ "$want_test" = 1 ] && [ ! -x .venv-amqtt/bin/amqtt ]; then
  "$python" -m venv .venv-amqtt
  .venv-amqtt/bin/python -m pip install --quiet --disable-pip-version-check "amqtt>=0.12,<0.13"
fi

# The Node peer of `airlane bench --compare`: npm ci when its node_modules is missing or older
# than the lock file. Without Node.js the peer is skipped, except in CI, where the compare
# test fails.
# The Yjs clients of the interoperability tests (tests/sync/node: yjs + y-websocket) and the
# RSocket-JS clients (tests/rsocket/node: rsocket-core + its TCP/WebSocket transports) and the
# MQTT.js client of the MQTT bridge tests (tests/mqtt/node: mqtt) and the WebRTC peer of the
# data-channel tests (tests/webrtc/node: node-datachannel) and the js-waku light node of the
# Waku tests (tests/waku/node: @waku/sdk) likewise, and the TypeScript compiler of the
# TypeScript client and console (clients/js, whose tests run in tests/js).
if [ "$want_test" = 1 ]; then
  if command -v node >/dev/null && command -v npm >/dev/null; then
    for node_dir in benchmarks/peers/node tests/sync/node tests/rsocket/node tests/mqtt/node \
                    tests/webrtc/node tests/waku/node clients/js; do
      if [ ! -f "$node_dir/node_modules/.package-lock.json" ] ||
         [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
        npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error
      fi
    done
  else
    echo "Node.js/npm not found: the node peer, Yjs, RSocket-JS, MQTT.js, node-datachannel, js-waku and TypeScript client tests are skipped" >&2
  fi
fi

# Debian packages the tests use: Chromium (browser tests), nats-server (the JetStream hub,
# event logs and schema registry), mosquitto (the MQTT bridge's broker), coturn (the STUN/TURN
# server of the WebRTC NAT lab), nftables (the lab's NAT routers), and clang with libbpf's
# headers (the lanes' BPF classifier, `airlane shaping`), and the ARM bare-metal compiler with
# QEMU (the AIRC C library built and run for a Cortex-M4, without their recommended extras);
# the tests start their own servers on free ports or in network namespaces they create.
if [ "$want_test" = 1 ]; then
  bare=""
  command -v arm-none-eabi-gcc >/dev/null || bare="$bare gcc-arm-none-eabi"
  command -v qemu-system-arm >/dev/null || bare="$bare qemu-system-arm"
  missing=""
  [ -x /usr/bin/chromium ] || missing="$missing chromium"
  command -v nats-server >/dev/null || missing="$missing nats-server"
  [ -x /usr/sbin/mosquitto ] || command -v mosquitto >/dev/null || missing="$missing mosquitto"
  command -v turnserver >/dev/null || missing="$missing coturn"
  command -v nft >/dev/null || [ -x /usr/sbin/nft ] || missing="$missing nftables"
  command -v clang >/dev/null || missing="$missing clang"
  [ -f /usr/include/bpf/bpf_helpers.h ] || missing="$missing libbpf-dev"
  if [ -n "$missing" ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "Installing Debian packages for the tests:$missing" >&2
    $sudo apt-get update -qq
    # shellcheck disable=SC2086 (a list of package names)
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
  fi
  if [ -n "$bare" ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "Installing Debian packages for the tests:$bare" >&2
    [ -n "$missing" ] || $sudo apt-get update -qq
    # shellcheck disable=SC2086 (a list of package names)
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $bare >/dev/null
  fi
fi

# The lanes' BPF classifier, compiled once here (cached by its source's hash) so that
# `airlane shaping attach` does not pay for it; where clang is missing, attach says so.
if command -v clang >/dev/null && [ -f /usr/include/bpf/bpf_helpers.h ]; then
  .venv/bin/airlane shaping build >/dev/null || echo "setup: the lanes' classifier did not compile (airlane shaping build says why)" >&2
fi
