#!/usr/bin/env bash
# The whole test suite: install (with test tools and Chromium), lint, type-check, test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test

echo "== ruff" >&2
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
echo "== mypy (strict on airlane.core, wire, sync and artifacts)" >&2
.venv/bin/mypy
echo "== pytest" >&2
set +e
.venv/bin/python -m pytest -q "$@"
status=$?
set -e
if [ "$status" = 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$status"
