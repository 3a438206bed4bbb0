"""The record of an install's last apply, in its state directory.

The record (``applied.json``) says which series this tool applied to which
jax, so that ``status`` can tell when jax was reinstalled or upgraded after
patching ("patches lost"), and ``revert`` can restore locally modified files
that ``apply --force`` set aside. Where it lives: ``statedir``.
"""

from __future__ import annotations

import json
import os
import re

from migration import environment
from migration import errors
from migration import fsutil
from migration import statedir

STATE_DIR_ENV = statedir.STATE_DIR_ENV
RECORD = statedir.RECORD
_SHA_RE = re.compile(r'[0-9a-f]{64}')

state_dir = statedir.install_dir


def backup_dir(sdir: str, version: str) -> str:
  """Returns where the pristine files of jax ``version`` are kept."""
  return os.path.join(sdir, statedir.BACKUP, version)


def displaced_dir(sdir: str, version: str) -> str:
  """Returns where ``apply --force`` keeps locally modified files."""
  return os.path.join(sdir, statedir.BACKUP, version, 'displaced')


def check(rec: object, where: str, env: environment.Environment) -> dict:
  """Checks the schema of a record (as ``plan._record`` writes it).

  Raises:
    PatchDataError: a field is missing or of the wrong type, a displaced
      path is not inside site-packages/jax, or it names another install.
  """
  def bad(why: str) -> errors.PatchDataError:
    return errors.PatchDataError(
        f'The record {where} is unusable ({why}); nothing was changed. '
        'Check jax with `python -m migration status`, then delete it.')

  if not isinstance(rec, dict):
    raise bad(f'not a JSON object but {type(rec).__name__}')
  for key in ('series', 'jax_version', 'dist_version'):
    if not isinstance(rec.get(key), str):
      raise bad(f'{key!r} missing or not a string')
  if rec.get('jax_dir') not in (None, statedir.jax_dir(env)):
    raise bad(f'it is the record of {rec["jax_dir"]!r}, another install')
  displaced = rec.get('displaced') or {}
  if not isinstance(displaced, dict):
    raise bad("'displaced' is not an object")
  for path, sha in displaced.items():
    try:
      fsutil.check_relpath(path, where)
    except errors.PatchDataError as e:
      raise bad(str(e)) from e
    if not isinstance(sha, str) or not _SHA_RE.fullmatch(sha):
      raise bad(f'bad sha256 {sha!r} for {path}')
  return rec


def load(sdir: str, env: environment.Environment) -> dict | None:
  """Returns the record in state folder ``sdir``, or None if there is none.

  Raises:
    PatchDataError: it is malformed (``check``) or too large.
    EnvironmentProblem: it is a link, FIFO or device, or another user's.
  """
  where = os.path.join(sdir, RECORD)
  data = statedir.read(where, env)
  if data is None:
    return None
  try:
    rec = json.loads(data)
  except ValueError as e:
    raise errors.PatchDataError(
        f'The record {where} is unusable ({e}); nothing was changed. '
        'Check jax with `python -m migration status`, then delete it.'
    ) from e
  return check(rec, where, env)


def find(env: environment.Environment, patched: bool) -> dict | None:
  """Returns the record of ``env``'s install, or None. Reads only.

  Args:
    env: the environment.
    patched: whether its files are (partly) patched (a record of an older
      release is this install's only then; ``statedir.legacy_claims``).

  Raises:
    PatchDataError, EnvironmentProblem: as ``load``; the root is unsafe.
  """
  if env.site_packages is None and env.purelib is None:
    return None
  rec = load(state_dir(env), env)
  if rec is None and env.jax_installed and statedir.legacy_claims(
      env, patched, lambda data: ())[1]:
    rec = load(statedir.root_dir(env), env)
  return rec


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
