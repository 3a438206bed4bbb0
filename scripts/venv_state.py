"""Says whether a venv's jax and jaxlib can be reused by make_venv.sh.

Run with the venv's Python and PYTHONPATH=<repository root>:

  python scripts/venv_state.py JAX_VERSION

Reusable means: jax and jaxlib JAX_VERSION are installed (a released jax, not
this project's patched wheel), every file in jax's RECORD is there with the
sha256 that RECORD lists, and the interpreter files that our series patches
are either all released or all patched by this tool (`python -m migration
status` says pristine or patched; `apply` is idempotent, so a patched venv
stays usable). Prints one line, `reusable: pristine` or `not reusable:
REASON`, and exits 0 or 1 accordingly; 1 also when jax cannot be inspected.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
  """Checks the running Python's environment; returns the exit code."""
  if len(argv) != 2:
    print('usage: venv_state.py JAX_VERSION', file=sys.stderr)
    return 2
  version = argv[1]
  try:
    from migration import environment  # pylint: disable=g-import-not-at-top
    from migration import manifest as manifest_lib  # pylint: disable=g-import-not-at-top
    from migration import state  # pylint: disable=g-import-not-at-top
    env = environment.detect()
    manifest = manifest_lib.load(manifest_lib.locate_patches_dir(None))
    status = state.classify(env, manifest)
  except Exception as e:  # pylint: disable=broad-except
    print(f'not reusable: cannot inspect it ({type(e).__name__}: {e})')
    return 1
  if env.dist_version != version or env.jaxlib_version != version:
    print(f'not reusable: has jax {env.dist_version}, jaxlib '
          f'{env.jaxlib_version}; wanted {version}')
    return 1
  if status.overall not in (state.Overall.PRISTINE, state.Overall.PATCHED):
    print(f'not reusable: {status.overall}: {status.message}')
    return 1
  targets = {f.path for f in status.files}
  for path, sha256 in sorted(env.record.items()):
    if path in targets:
      continue
    # RECORD's paths are relative to site-packages; the dist-info's files
    # are there too (uv hashes INSTALLER), so not env.path (jax/ only).
    full = os.path.join(env.site_packages, *path.split('/'))
    if manifest_lib.sha256_path(full) != sha256:
      print(f'not reusable: {path} differs from jax\'s RECORD')
      return 1
  print(f'reusable: {status.overall}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
