#!/usr/bin/env bash
# Creates a fresh virtual environment with jax and jaxlib of one release from
# the package registry, plus what the tests and the migration tool use.
#
# Usage: scripts/make_venv.sh JAX_VERSION VENV_DIR
set -euo pipefail

version="${1:?usage: make_venv.sh JAX_VERSION VENV_DIR}"
venv="${2:?usage: make_venv.sh JAX_VERSION VENV_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
python="$("$here/find_python.sh" "$version")"

rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "jax==$version" "jaxlib==$version" -r "$here/../requirements-dev.txt" \
  2> >(grep -v "^WARNING: Location" >&2)
echo "made $venv: $("$venv/bin/python" --version), jax $version"
