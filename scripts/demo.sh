#!/usr/bin/env bash
# The main job: install, then run the gateway on its embedded defaults (in-memory hub,
# synthetic backend) and stream a chat completion over SSE and WebSocket, with measurements.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/airlane demo "$@"
