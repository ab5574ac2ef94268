#!/usr/bin/env bash
# The test suite: builds or reuses the environments, then runs every test
# (fast, slow and service-backed) after ruff's lint and format checks. Extra
# arguments go to pytest.
#
# Three test processes (pytest-xdist) on two cores, each module whole in one of them
# (loadscope), so a module's shared run or server is built once: service-backed tests
# spend part of their time waiting (process start-ups, polls, Prefect's 60-s leases, an
# S3 outage), which the other processes fill. Measured from fresh clones: 864 s with
# three against 1,043 s with two (9717ab6, 044ff83); at 7d090b8, before the lease and
# outage tests, a third gained nothing (1,055 s against 1,058 s).
# Modules go out costliest first (tests/module_seconds.py sorts them); xdist's own
# reorder, by number of tests per module, would hand the long one-test modules out last.
# TANDEM_TEST_WORKERS=0 runs everything in this process.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/setup.sh"
cd "$repo"
# Lint and format are part of the suite: a failure here fails the run before pytest.
ruff check .
ruff format --check .
workers="${TANDEM_TEST_WORKERS:-3}"
if [ "$workers" = 0 ]; then exec python -m pytest "$@"; fi
exec python -m pytest -n "$workers" --dist loadscope --no-loadscope-reorder "$@"
