#!/usr/bin/env bash
# The main job: a fresh venv with jax and jaxlib from the registry, our patch
# series applied to it by the migration tool, then every example kernel run,
# each printing its result beside an independently computed value.
#
# Usage: scripts/main.sh            (jax 0.12.0.1)
#        JAX_VERSION=0.12.0 scripts/main.sh
set -euo pipefail

cd "$(dirname "$0")/.."
version="${JAX_VERSION:-0.12.0.1}"
venv=".venvs/main-jax-$version"

scripts/make_venv.sh "$version" "$venv"
PYTHONPATH="$PWD" "$venv/bin/python" -m migration apply
"$venv/bin/python" examples/run_all.py
