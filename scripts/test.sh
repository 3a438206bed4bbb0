#!/usr/bin/env bash
# Runs every test: lint, the migration tool's tests, and the upstream-style
# interpreter tests against a fresh venv of jax from the registry that the
# migration tool has patched.
#
# Usage: scripts/test.sh            (jax 0.12.0.1)
#        JAX_VERSION=0.12.0 scripts/test.sh
#        JAX_VERSION=0.12.0 TEST_SCOPE=kernels scripts/test.sh
#          (apply, then only the interpreter tests and the examples)
set -euo pipefail

cd "$(dirname "$0")/.."
version="${JAX_VERSION:-0.12.0.1}"
venv=".venvs/test-jax-$version"
# The migration tests install the jax wheel they test into venvs of the
# running Python, which may be too old for the default (0.12.0.1): test the
# version of this run, as the bazel targets do.
export JAX_INTERPRET_PATCHES_TEST_VERSION="${JAX_INTERPRET_PATCHES_TEST_VERSION:-$version}"

scripts/make_venv.sh "$version" "$venv"
PYTHONPATH="$PWD" "$venv/bin/python" -m migration apply
PYTHONPATH="$PWD" "$venv/bin/python" -m migration status
"$venv/bin/python" scripts/run_tests.py --scope="${TEST_SCOPE:-all}"
