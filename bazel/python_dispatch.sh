#!/usr/bin/env bash
# Interpreter of the //bazel:venv_python3 runtime: execs the Python named by
# $JAX_TEST_PYTHON, which jax_py_test (defs.bzl) sets per target.
#
# A relative $JAX_TEST_PYTHON (".venvs/test-jax-V/bin/python") is resolved
# against the repository root: $JAX_INTERPRET_REPO if set (scripts/
# bazel_test.sh passes it with --test_env), otherwise the directory this
# script really lives in (its runfiles entry is a symlink to the source).
set -euo pipefail

python="${JAX_TEST_PYTHON:?JAX_TEST_PYTHON is not set; use jax_py_test}"
repo="${JAX_INTERPRET_REPO:-$(dirname "$(dirname "$(readlink -f "$0")")")}"
if [[ "$python" != /* ]]; then
  python="$repo/$python"
fi
if [[ ! -x "$python" ]]; then
  echo "python_dispatch.sh: no venv Python at $python;" \
    "run scripts/bazel_test.sh to create the venvs" >&2
  exit 1
fi
# The wheels scripts/bazel_test.sh fetched before the offline run: the
# released jax wheels the migration tests read, and jax, jaxlib and their
# dependencies for tests that make venvs of their own. pip uses only these.
wheels="$repo/.venvs/wheels"
if [[ -d "$wheels" ]]; then
  export JAX_INTERPRET_PATCHES_WHEEL_DIRS="${JAX_INTERPRET_PATCHES_WHEEL_DIRS:-$wheels}"
  export PIP_NO_INDEX=1 PIP_FIND_LINKS="$wheels" PIP_DISABLE_PIP_VERSION_CHECK=1
fi
# Each test gets its own $TMPDIR, removed afterwards, so that tests running
# side by side (in separate PID namespaces) never see each other's
# temporary files and none outlive their test. The tool no longer needs it:
# its sweep of scratch folders goes by an owner lock, not by process id.
TMPDIR="$(mktemp -d /tmp/bazel-test-tmp.XXXXXXXX)"
export TMPDIR
status=0
"$python" "$@" || status=$?
rm -rf "$TMPDIR"
exit "$status"
