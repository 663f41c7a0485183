#!/usr/bin/env bash
# Prepares, on the CPU machine, what bench/gpu_issue33.sh needs on a GPU machine that has torch and
# transformers but neither pydantic nor platformdirs nor mistral-common, and no network:
#   .whl/         wheels of the packages it lacks (CPython 3.12, manylinux)
#   .gpu/work/    the Mistral v1 tokenizer, saved as a transformers folder
#   .gpu/old/src  the source tree before issue 33 (76259e8)
#   .gpu/prev/src the first GPU session's final tree (6647022)
# Both folders are ignored by git (.git/info/exclude) and travel with `carry`.
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude || echo /.whl/ >> .git/info/exclude
grep -qx '/.gpu/' .git/info/exclude || echo /.gpu/ >> .git/info/exclude
if [ ! -d .whl ]; then
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    pydantic==2.13.4 pydantic_core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 platformdirs==4.14.8
fi
python3 -c "from halluprobe.tiny import mistral_tokenizer_dir; mistral_tokenizer_dir('.gpu/work/tokenizer')"
for tree in old:76259e8 prev:6647022; do
  name=${tree%%:*} commit=${tree#*:}
  if [ ! -d ".gpu/$name/src" ]; then
    mkdir -p ".gpu/$name"
    git archive "$commit" src | tar -x -C ".gpu/$name"
  fi
done
du -sh .whl .gpu
