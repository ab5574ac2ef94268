#!/usr/bin/env bash
# The test suite: builds or reuses the environments, then runs every test
# (fast, slow and service-backed). Extra arguments go to pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/setup.sh"
cd "$repo"
exec python -m pytest "$@"
