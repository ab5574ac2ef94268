#!/usr/bin/env bash
# Installs this clone into a fresh virtual environment the way a user would
# (`pip install <clone>`, CPU torch named explicitly) and grades a task with it:
# the installed package alone must be able to grade (swebench, pytest and the sandbox's
# helper files come with it), and no CUDA library may have been pulled in.
#   bash scripts/check_install.sh [VENV_DIR]
# pip's own configuration applies (a local wheel folder or index makes it offline).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$(mktemp -d)/venv}"
python="${TANDEM_PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
start=$(date +%s)

"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip 2> >(grep -vE "^WARNING: Location '" >&2)
# The CPU torch first and alone, without its dependencies (its index is asked about torch
# only; unreachable, pip would retry it for every package), then the clone.
"$venv/bin/pip" install --quiet --no-deps --extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" \
  "torch==2.13.0+cpu" 2> >(grep -vE "^WARNING: (Location '|Retrying)" >&2)
"$venv/bin/pip" install --quiet "$repo" 2> >(grep -vE "^WARNING: Location '" >&2)
installed=$(($(date +%s) - start))

if "$venv/bin/pip" list 2>/dev/null | grep -iE '^nvidia-|^triton '; then
  echo "FAIL: CUDA packages were installed" >&2; exit 1
fi
"$venv/bin/pip" check
"$venv/bin/python" -c "import torch; assert torch.__version__.endswith('+cpu'), torch.__version__; print('torch', torch.__version__)"
cd "$(mktemp -d)"   # away from the clone: only the installed package can be imported
"$venv/bin/tandem" --version
"$venv/bin/python" - <<'PY'
import time
import engines
from engines.env.config import EnvConfig
from engines.env.grader import GradingPool
from engines.env.task_sources.micro import generate_micro_tasks

assert "site-packages" in engines.__file__, engines.__file__
tasks = generate_micro_tasks(4, seed=0)
start = time.monotonic()
with GradingPool(EnvConfig(workers=1)) as pool:
    gold = pool.grade_many([(t, t.patch) for t in tasks])
    empty = pool.grade_many([(t, "") for t in tasks])
assert all(g.resolved for g in gold), gold
assert not any(e.resolved or e.infra_failure for e in empty), empty
print(f"graded {2 * len(tasks)} patches in {time.monotonic() - start:.1f}s with the installed package "
      f"({engines.__file__}): gold resolved {sum(g.resolved for g in gold)}/{len(tasks)}, empty 0/{len(tasks)}")
PY
echo "install ${installed}s, total $(($(date +%s) - start))s; venv $venv"
