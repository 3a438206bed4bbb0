#!/usr/bin/env bash
# Tests the migration tool on the oldest Python it supports (3.10, the
# requires-python of pyproject.toml): `pip install .` into a fresh venv, the
# installed command's --help, then the fault-injection suites, the scratch
# folder sweep's tests, the manifest and compatibility tests and the layout
# test (both CLIs' --help; migration imports no jax_fork) with that Python.
# jax itself needs a
# newer Python; the tool never imports it, so the tests install its wheel
# with --ignore-requires-python.
#
# Usage: scripts/test_oldest_python.sh
set -euo pipefail

cd "$(dirname "$0")/.."
python=""
for candidate in "$HOME"/.pyenv/versions/3.10.*/bin/python python3.10; do
  if "$candidate" -c "" > /dev/null 2>&1; then
    python="$(command -v "$candidate")"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "error: no Python 3.10 found (looked in ~/.pyenv/versions and for" \
    "python3.10 on PATH)" >&2
  exit 1
fi
venv=".venvs/tool-py3.10"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  . pytest 'tomli; python_version < "3.11"' \
  2> >(grep -v "^WARNING: Location" >&2)
rm -rf build
"$venv/bin/jax-interpret-patches" --help > /dev/null
echo "installed the tool into $venv: $("$venv/bin/python" --version)"
"$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/migration/fault_test.py tests/migration/state_fault_test.py \
  tests/migration/output_fault_test.py tests/migration/scratch_test.py \
  tests/migration/manifest_test.py tests/migration/compat_test.py \
  tests/migration/layout_test.py
