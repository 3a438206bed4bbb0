"""The state directory of a site-packages: lock, journal, backup, record.

The record (``applied.json``) says which series this tool applied to which
jax, so that ``status`` can tell when jax was reinstalled or upgraded after
patching ("patches lost"), and ``revert`` can restore locally modified files
that ``apply --force`` set aside.
"""

from __future__ import annotations

import hashlib
import json
import os

from migration import environment

STATE_DIR_ENV = 'JAX_INTERPRET_PATCHES_STATE_DIR'
RECORD = 'applied.json'


def state_dir(env: environment.Environment) -> str:
  """Returns the directory for the lock file, journal, backup and record.

  ``$JAX_INTERPRET_PATCHES_STATE_DIR`` if set; otherwise
  ``<site-packages>/../.jax-interpret-patches``, falling back to a per
  site-packages directory in the user cache when that parent is read-only.
  """
  override = os.environ.get(STATE_DIR_ENV)
  if override:
    return os.path.abspath(override)
  site = env.site_packages or env.purelib
  assert site is not None
  parent = os.path.dirname(site)
  if os.access(parent, os.W_OK):
    return os.path.join(parent, '.jax-interpret-patches')
  xdg = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
  key = hashlib.sha256(site.encode()).hexdigest()[:16]
  return os.path.join(xdg, 'jax-interpret-patches', 'state', key)


def backup_dir(sdir: str, version: str) -> str:
  """Returns where the pristine files of jax ``version`` are kept."""
  return os.path.join(sdir, 'backup', version)


def displaced_dir(sdir: str, version: str) -> str:
  """Returns where ``apply --force`` keeps locally modified files."""
  return os.path.join(sdir, 'backup', version, 'displaced')


def load(sdir: str) -> dict | None:
  """Returns the record of the last apply in ``sdir``, or None."""
  try:
    with open(os.path.join(sdir, RECORD), encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def find(env: environment.Environment) -> dict | None:
  """Returns the record for ``env``'s site-packages, or None.

  Reads only: never creates the state directory.
  """
  if env.site_packages is None and env.purelib is None:
    return None
  return load(state_dir(env))


def lost_message(env: environment.Environment, rec: dict | None,
                 pristine: bool, patched: bool) -> str | None:
  """Says how patches recorded as applied were lost, or None if they were not.

  Args:
    env: the environment now.
    rec: its record (``find``), or None.
    pristine: whether the target files are now the released ones.
    patched: whether they are now (partly) patched.

  Returns:
    A sentence for the user, or None.
  """
  if not rec or patched:
    return None
  was = f'jax {rec["dist_version"]} was patched with {rec["series"]}'
  if not env.jax_installed:
    return f'{was}, and jax has since been uninstalled.'
  if env.dist_version != rec['dist_version']:
    return (f'{was}, and jax has since been reinstalled as '
            f'{env.dist_version}; run apply again.')
  if pristine:
    return (f'{was}, and its files have since been replaced by the released '
            'ones (jax reinstalled); run apply again.')
  return None
