#!/usr/bin/env bash
# Makes, or reuses, a virtual environment with jax and jaxlib of one release
# from the package registry, plus the packages of a requirements file.
#
# Usage: scripts/make_venv.sh [--main] JAX_VERSION VENV_DIR
#
# --main installs requirements-main.txt (what the migration tool and the
# examples need); the default is requirements-dev.txt (that plus pytest and
# ruff, for the tests).
#
# An existing VENV_DIR is reused when its Python is the one this release
# needs and scripts/venv_state.py finds jax and jaxlib JAX_VERSION with jax's
# files as its RECORD lists them (the interpreter files either released or
# patched by the migration tool); otherwise it is made anew. The last line
# says which happened.
#
# Every module of a venv is compiled to bytecode when it is made (uv's
# --compile-bytecode, which compiles all of site-packages; pip compiles what
# it installs), and jax's and jaxlib's again when it is reused (compileall:
# only what is stale, e.g. the files the migration tool patched, whose old
# bytecode it removes): where PYTHONDONTWRITEBYTECODE is set, Python would
# otherwise compile jax's ~600 modules again on every run.
#
# Venvs are made with uv (`uv venv`, `uv pip install`): `uv` on PATH, else
# the copy in ${XDG_CACHE_HOME:-~/.cache}/jax-interpret-patches/uv, which
# this script installs there from the registry with pip the first time. Where
# uv cannot be had or fails, and with JAX_INTERPRET_PATCHES_NO_UV=1, it uses
# `python -m venv` and pip instead (70 s instead of uv's 1 s, measured once
# on a loaded 2-core machine with both caches warm).
set -euo pipefail

requirements=requirements-dev.txt
if [[ "${1:-}" == --main ]]; then
  requirements=requirements-main.txt
  shift
fi
usage="usage: make_venv.sh [--main] JAX_VERSION VENV_DIR"
version="${1:?$usage}"
venv="${2:?$usage}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
python="$("$here/find_python.sh" "$version")"
requirements="$root/$requirements"

# Prints the uv executable to use, installing it into the cache first if
# needed; prints nothing if there is none.
find_uv() {
  if [[ "${JAX_INTERPRET_PATCHES_NO_UV:-}" == 1 ]]; then
    return 0
  fi
  if command -v uv > /dev/null; then
    command -v uv
    return 0
  fi
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/jax-interpret-patches/uv"
  if ! "$dir/bin/uv" --version > /dev/null 2>&1; then
    echo "installing uv into $dir (pip install --target, once)" >&2
    local tmp="$dir.tmp.$$" log
    log="$(mktemp)"
    rm -rf "$tmp"
    if "$python" -m pip install --quiet --disable-pip-version-check \
        --target "$tmp" uv > "$log" 2>&1 &&
        "$tmp/bin/uv" --version > /dev/null 2>&1; then
      rm -rf "$dir"
      mkdir -p "$(dirname "$dir")"
      mv "$tmp" "$dir"
    else
      echo "could not install uv; using venv and pip:" >&2
      grep -v "^WARNING: " "$log" >&2 || true
      rm -rf "$tmp" "$log"
      return 0
    fi
    rm -f "$log"
  fi
  echo "$dir/bin/uv"
}

# Whether $venv can be kept: same Python minor version, jax as released or
# as patched by us (scripts/venv_state.py). Prints why not.
reusable() {
  [[ -x "$venv/bin/python" ]] || return 1
  local want have
  want="$("$python" -c 'import sys; print(sys.version_info[:2])')"
  have="$("$venv/bin/python" -c 'import sys; print(sys.version_info[:2])' \
    2> /dev/null)" || true
  if [[ "$have" != "$want" ]]; then
    echo "not reusable: Python $have, wanted $want"
    return 1
  fi
  PYTHONPATH="$root" "$venv/bin/python" "$here/venv_state.py" "$version"
}

# Prints the venv's site-packages folder of one kind (purelib, platlib).
site_dir() {
  "$venv/bin/python" -c "import sysconfig; print(sysconfig.get_path('$1'))"
}

uv="$(find_uv)"
reason=""
if [[ -d "$venv" ]]; then
  if reason="$(reusable)"; then
    # Installs what the requirements add; jax and jaxlib are left alone.
    if [[ -n "$uv" ]]; then
      "$uv" pip install --quiet --python "$venv/bin/python" \
        --compile-bytecode "jax==$version" "jaxlib==$version" \
        -r "$requirements"
    else
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "jax==$version" "jaxlib==$version" -r "$requirements" \
        2> >(grep -v "^WARNING: Location" >&2)
    fi
    # A venv made before its modules were compiled at install: compile jax
    # and jaxlib now (0.2 s when they already are).
    "$venv/bin/python" -m compileall -q "$(site_dir purelib)/jax" \
      "$(site_dir platlib)/jaxlib" > /dev/null
    echo "reused $venv (${reason#reusable: } jax $version," \
      "$("$venv/bin/python" --version))"
    exit 0
  fi
  reason=" (the old one was ${reason:-not reusable})"
fi

rm -rf "$venv"
made_with=""
if [[ -n "$uv" ]]; then
  # --seed installs pip, which the migration tool uses to fetch wheels. jax
  # itself is copied out of uv's cache, as it is the package that gets
  # patched in place; the rest (jaxlib: 300 MB) is hard-linked.
  if "$uv" venv --quiet --seed --python "$python" "$venv" &&
      "$uv" pip install --quiet --python "$venv/bin/python" \
        --link-mode=copy --no-deps "jax==$version" &&
      "$uv" pip install --quiet --python "$venv/bin/python" \
        --compile-bytecode "jax==$version" "jaxlib==$version" \
        -r "$requirements"; then
    made_with=uv
  else
    echo "uv failed; making $venv with venv and pip instead" >&2
    rm -rf "$venv"
  fi
fi
if [[ -z "$made_with" ]]; then
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "jax==$version" "jaxlib==$version" -r "$requirements" \
    2> >(grep -v "^WARNING: Location" >&2)
  made_with="venv and pip"
fi
echo "made $venv with $made_with$reason: $("$venv/bin/python" --version)," \
  "jax $version"
