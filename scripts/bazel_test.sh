#!/usr/bin/env bash
# Runs `bazel test //...` offline: every upstream-style test against each jax
# version of bazel/defs.bzl, in the patched venvs .venvs/test-jax-<version>.
#
# Installs Debian's Bazel 4 (bazel-bootstrap) if `bazel` is missing, makes
# and patches a venv only if it is missing or not patched, and fetches the
# wheels the tests install into .venvs/wheels. Then no network is used:
# Bazel downloads nothing (--experimental_repository_disable_download) and
# the tests run without network (.bazelrc).
#
# Usage: scripts/bazel_test.sh [BAZEL_TEST_ARGS...]   (default //...)
set -euo pipefail

cd "$(dirname "$0")/.."
# The jax versions of the test targets: JAX_VERSIONS in bazel/defs.bzl.
read -r -a versions < <(sed -n 's/^JAX_VERSIONS = \[\(.*\)\]$/\1/p' \
  bazel/defs.bzl | tr -d '",')
if ((${#versions[@]} == 0)); then
  echo "bazel_test.sh: no JAX_VERSIONS = [...] line in bazel/defs.bzl" >&2
  exit 1
fi

if ! command -v bazel > /dev/null; then
  apt-get update && apt-get install -y bazel-bootstrap
fi

# Prints the migration tool's state of a venv's jax ("patched", ...).
state() {
  PYTHONPATH="$PWD" "$1/bin/python" -m migration status --json 2> /dev/null |
    "$1/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["state"])' \
    2> /dev/null || echo missing
}

for version in "${versions[@]}"; do
  venv=".venvs/test-jax-$version"
  if [[ -x "$venv/bin/python" && "$(state "$venv")" == patched ]]; then
    echo "$venv: patched"
    continue
  fi
  scripts/make_venv.sh "$version" "$venv"
  PYTHONPATH="$PWD" "$venv/bin/python" -m migration apply
done

# Wheels for the offline run (bazel/python_dispatch.sh points pip and the
# migration tests at .venvs/wheels): jax, jaxlib and their dependencies for
# tests that make venvs of their own, and the released jax wheel of every
# served version. Fetches only what is missing.
for version in "${versions[@]}"; do
  if ! compgen -G ".venvs/wheels/jaxlib-$version-*.whl" > /dev/null; then
    # That version's own Python, so the wheels fit it.
    ".venvs/test-jax-$version/bin/python" -m pip download --quiet \
      --disable-pip-version-check \
      --only-binary=:all: -d .venvs/wheels "jax==$version" "jaxlib==$version" \
      2> >(grep -v "^WARNING: Location" >&2)
  fi
done
python=".venvs/test-jax-${versions[0]}/bin/python"
newest="$("$python" scripts/served_releases.py --which=newest | sort)"
if [[ "$newest" != "$(printf '%s\n' "${versions[@]}" | sort)" ]]; then
  echo "bazel_test.sh: JAX_VERSIONS in bazel/defs.bzl must be the newest" \
    "served release of each minor line:" $newest >&2
  exit 1
fi
JAX_INTERPRET_PATCHES_CACHE="$PWD/.venvs" PYTHONPATH="$PWD" "$python" -c '
from migration import manifest, wheels
for version in manifest.load("patches").served_versions():
  wheels.pristine_wheel(version)
'

if (($# == 0)); then
  set -- //...
fi
exec bazel test \
  --experimental_repository_disable_download \
  --nocache_test_results \
  --local_test_jobs=2 \
  --test_env=JAX_INTERPRET_REPO="$PWD" \
  "$@"
