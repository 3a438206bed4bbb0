#!/usr/bin/env bash
# Prints the path of a Python interpreter that can install the given jax
# release: jax 0.11 and newer need Python 3.12 or newer.
#
# Usage: scripts/find_python.sh JAX_VERSION
set -euo pipefail

version="${1:?usage: find_python.sh JAX_VERSION}"
IFS=. read -r major minor _ <<< "$version"
if (( major > 0 || minor >= 11 )); then
  wanted=3.12
else
  wanted=3.11
fi
for candidate in "$HOME"/.pyenv/versions/"$wanted".*/bin/python "python$wanted"; do
  # A pyenv shim exists for every installed version but fails unless that
  # version is selected, so check that the candidate really runs.
  if "$candidate" -c "" > /dev/null 2>&1; then
    command -v "$candidate"
    exit 0
  fi
done
echo "error: no Python $wanted found for jax $version (looked in" \
  "~/.pyenv/versions and for python$wanted on PATH)" >&2
exit 1
