#!/usr/bin/env bash
# Issue 33's GPU figures in one prepared run (a time limit per step; outputs under $OUT), on
# LLaVA-1.5-7B's shape with random weights in bf16. Prepare here first: bash bench/gpu_prepare.sh
# (wheels the GPU machine lacks, the Mistral tokenizer, the older source trees), then carry .whl
# and .gpu. STEPS picks the steps. A session has 15 minutes of device time in all (start-up
# included), so the first call holds what matters most (about 6 minutes, timeout_s 560):
#   STEPS="pope large greedy" bash bench/gpu_issue33.sh; then, if time is left, STEPS=methods
#   pope      POPE-shaped work, 32 images x 18 questions, batch 144: the first GPU session's final
#             tree (.gpu/prev, 201 q/s there) and this one with packed rows (hf/packed.py) on and
#             off (off: stacked rows, built in place, images encoded on the worker thread); prev
#             has neither: one line, labelled "absent"
#   large     packed rows at 288 and 576 rows (16 and 32 images a batch), 64 images x 18 questions
#             (stacked rows at 576 would need ~170 GB of copied prefixes; packed, about 16 GB)
#   greedy    256 captions of 64 tokens at batch 128 (two batches: the second one's images are
#             read and encoded while the first decodes) through the engine's own answer(),
#             greedy decoding in the loop, the worker thread on and off
#   methods   128 captions at batch 64, every method, the worker thread on (the GPU default)
#   questions 32 images x 6 questions (192 rows of 64 tokens) at batch 64: rows across images after
#             each image's cached prefixes, a batch's new images' prefixes in one pass; greedy, VCD;
#             the decoding loop's packed rows (an image's questions in one row) on and off
#   sizes     this tree's POPE-shaped work at batch 18, 72 and 144 rows (packed)
#   old       the tree before issue 33 (.gpu/old) against this one, batch 144
set -u
export PYTHONUNBUFFERED=1 TQDM_DISABLE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STEPS=${STEPS:-pope large greedy}
# DRY=1: the same steps on this CPU machine with a tiny model and 1 run each (checks the script
# and the trees before a GPU call spends device time on them; its figures mean nothing)
if [ "${DRY:-0}" = 1 ]; then
  SHAPE="--device cpu --dtype bfloat16 --hidden 64 --layers 4 --head-dim 32 --vision-hidden 64 --vision-layers 2"  # 4 layers: PAI amplifies from layer 2
  DECODER="--model llava-shaped $SHAPE"; RUNS=1; W=${W:-/tmp/work-dry}
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}  # this tree, not whichever checkout is installed
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=$PWD/src:/tmp/site
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  SHAPE="--device cuda --dtype bfloat16 --hidden 4096 --layers 32 --head-dim 128 --vision-hidden 1024 --vision-layers 24"
  DECODER="--model llava-1.5-7b --device cuda --dtype bfloat16"; RUNS=3; W=/tmp/work
fi
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
mkdir -p $W; cp -r .gpu/work/tokenizer $W/
step() { local limit=$1 name=$2; shift 2; echo "== $name ($(date +%T), limit $limit s)"; timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1; echo "exit $?"; tail -n 25 "$OUT/$name.txt"; }
for s in $STEPS; do case $s in
pope) step ${POPE_LIMIT:-200} engine_pope python3 bench/bench_engine.py --modes c $SHAPE --images 32 --batch-size 144 --pack on,off \
    --runs 1 --inner-runs $RUNS --work-dir $W --src prev=.gpu/prev/src --src new=src --json "$OUT/engine_pope.json" ;;
large) step ${LARGE_LIMIT:-120} engine_large python3 bench/bench_engine.py --modes c $SHAPE --images 64 --batch-size 288,576 --pack on \
    --runs 1 --inner-runs $RUNS --work-dir $W --json "$OUT/engine_large.json" ;;
greedy) step ${GREEDY_LIMIT:-170} decode_greedy python3 bench/bench_decode.py $DECODER --images 256 \
    --batch-size 128 --new-tokens 64 --runs $RUNS --engines prefix --via answer --prefetch on,off --methods greedy --work-dir $W ;;
methods) step ${METHODS_LIMIT:-330} decode_methods python3 bench/bench_decode.py $DECODER --images 128 \
    --batch-size 64 --new-tokens 64 --runs $RUNS --engines prefix --passes joint --via answer --work-dir $W ;;
questions) step ${QUESTIONS_LIMIT:-300} decode_questions python3 bench/bench_decode.py $DECODER --images 32 \
    --questions 6 --batch-size 64 --new-tokens 64 --runs $RUNS --engines prefix --passes joint --via answer --methods vcd --pack on,off --work-dir $W ;;
sizes) step ${SIZES_LIMIT:-150} engine_sizes python3 bench/bench_engine.py --modes c $SHAPE --images 32 --batch-size 18,72,144 \
    --runs 1 --inner-runs $RUNS --work-dir $W --json "$OUT/engine_sizes.json" ;;
old) step ${OLD_LIMIT:-200} engine_old python3 bench/bench_engine.py --modes c $SHAPE --images 32 --batch-size 144 --runs 1 --inner-runs $RUNS \
    --work-dir $W --src old=.gpu/old/src --src new=src --json "$OUT/engine_old.json" ;;
*) echo "unknown step $s" ;;
esac; done
echo "== done $(date +%T)"
