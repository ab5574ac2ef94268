#!/usr/bin/env bash
# The main job: builds or reuses the environments, then runs `tandem run` with the
# default tiny-MoE configuration (or the TOML file and overrides given).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/setup.sh"
cd "$repo"
exec tandem run "$@"
