#!/usr/bin/env bash
# Runs every test: lint, the upstream-style interpreter tests, the migration
# tool's tests and the examples, against a venv of jax from the registry
# (made with uv, or reused when its jax files are as released or as patched
# by us) that the migration tool has patched. Each step prints its name and
# elapsed time; scripts/run_tests.py does the same for each stage.
#
# Usage: scripts/test.sh            (jax 0.12.0.1)
#        JAX_VERSION=0.12.0 scripts/test.sh
#        JAX_VERSION=0.12.0 TEST_SCOPE=kernels scripts/test.sh
#          (apply, then only the interpreter tests and the examples)
set -euo pipefail

cd "$(dirname "$0")/.."
source scripts/progress.sh
version="${JAX_VERSION:-0.12.0.1}"
venv=".venvs/test-jax-$version"
# The migration tests install the jax wheel they test into venvs of the
# running Python, which may be too old for the default (0.12.0.1): test the
# version of this run, as the bazel targets do.
export JAX_INTERPRET_PATCHES_TEST_VERSION="${JAX_INTERPRET_PATCHES_TEST_VERSION:-$version}"

step "venv $venv" scripts/make_venv.sh "$version" "$venv"
# --verbose: the status table once, after the apply.
step "apply the patch series" \
  env PYTHONPATH="$PWD" "$venv/bin/python" -m migration apply --verbose
# run_tests.py times its stages itself, and its closing `tests: N passed,
# N failed, N skipped` line stays the last.
echo "==> tests (scope ${TEST_SCOPE:-all}, jax $version)"
"$venv/bin/python" scripts/run_tests.py --scope="${TEST_SCOPE:-all}"
