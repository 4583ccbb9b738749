#!/usr/bin/env bash
# Create .venv and install Airlane into it. With --test, also install the test tools and the
# Debian packages the test suite drives (Chromium for the browser tests). Idempotent.
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
# The stamp records what was installed, so a second run with unchanged pyproject is instant.
extras=$([ "$want_test" = 1 ] && echo "[test]" || echo "")
stamp=".venv/.airlane-installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".$extras"
  touch "$stamp"
fi

if [ "$want_test" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "Installing Debian's chromium for the browser tests..." >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
