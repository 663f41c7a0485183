#!/usr/bin/env bash
# Issue 33's GPU figures in one prepared run (a time limit per step; outputs under $OUT):
# POPE-shaped work on the prefix-cache engine before (.gpu/old/src: the tree before issue 33)
# and after, batch sizes that cross images, and captions through the decoding loop, all on
# LLaVA-1.5-7B's shape with random weights in bf16. Needs .whl (pydantic and friends: the GPU
# machine lacks them) and .gpu/work/tokenizer (the Mistral v1 tokenizer: no mistral-common there).
set -u
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/src:/tmp/site
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
SHAPE="--device cuda --dtype bfloat16 --hidden 4096 --layers 32 --head-dim 128 --vision-hidden 1024 --vision-layers 24"
W=/tmp/work; mkdir -p $W; cp -r .gpu/work/tokenizer $W/
step() { local limit=$1 name=$2; shift 2; echo "== $name ($(date +%T))"; timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1; echo "exit $?"; tail -n 25 "$OUT/$name.txt"; }
step ${COMPARE_LIMIT:-230} engine_compare python3 bench/bench_engine.py --modes c $SHAPE --images 32 --batch-size 144 --runs 1 --inner-runs 3 \
    --work-dir $W --src old=.gpu/old/src --src new=src --json "$OUT/engine_compare.json"
if [ "${SIZES:-1}" = 1 ]; then
step 120 engine_sizes python3 bench/bench_engine.py --modes c $SHAPE --images 32 --batch-size 18,36,72,144 --runs 1 --inner-runs 3 \
    --work-dir $W --json "$OUT/engine_sizes.json"
fi
step ${DECODE_LIMIT:-210} decode_captions python3 bench/bench_decode.py --model llava-1.5-7b --device cuda --dtype bfloat16 --images 64 \
    --batch-size 64 --new-tokens 64 --runs 3 --engines prefix --passes joint --work-dir $W
echo "== done $(date +%T)"
