#!/usr/bin/env bash
# The main job: a venv with jax and jaxlib from the registry (made with uv, or
# reused when its jax files are as released or as patched by us), our patch
# series applied to it by the migration tool, then every example kernel run,
# each printing its result beside an independently computed value, and a
# summary. Each step prints its name and elapsed time.
#
# Usage: scripts/main.sh            (jax 0.12.0.1)
#        JAX_VERSION=0.12.0 scripts/main.sh
set -euo pipefail

cd "$(dirname "$0")/.."
source scripts/progress.sh
version="${JAX_VERSION:-0.12.0.1}"
venv=".venvs/main-jax-$version"
start="$(now)"

step "venv $venv" scripts/make_venv.sh --main "$version" "$venv"
step "apply the patch series" \
  env PYTHONPATH="$PWD" "$venv/bin/python" -m migration apply
step "examples" "$venv/bin/python" examples/run_all.py
echo "main job: done in $(elapsed_since "$start") s"
