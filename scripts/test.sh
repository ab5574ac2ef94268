#!/usr/bin/env bash
# The test suite: builds or reuses the environments, then runs every test
# (fast, slow and service-backed) after ruff's lint and format checks. Extra
# arguments go to pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/setup.sh"
cd "$repo"
# Lint and format are part of the suite: a failure here fails the run before pytest.
ruff check .
ruff format --check .
exec python -m pytest "$@"
