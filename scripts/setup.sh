#!/usr/bin/env bash
# Installs halluprobe with everything the demo and the tests need, on the CPU.
# torch first and pinned: an unpinned torch (or a package that pulls one) brings the CUDA
# build, several GB. Never torchvision: its registry wheels break `import transformers` here.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
  "$PY" -m pip install --quiet "torch==2.13.0"
fi
"$PY" -m pip install --quiet -e ".[hf,report,dev]"
command -v pyenv >/dev/null && pyenv rehash || true
if "$PY" -c "import torchvision" 2>/dev/null; then
  echo "warning: torchvision is installed; with the CPU torch it can break transformers" >&2
fi
