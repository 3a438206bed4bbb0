"""The two interpreters the benchmarks compare: stock and patched jax.

By default both are venvs under `.venvs/` of the repository, made with
`scripts/make_venv.sh` and, for the patched one, patched with `python -m
migration apply`; existing ones are reused (and put back into the right
state with `apply` or `revert` if needed). Interpreters given on the command
line are only checked, never changed.
"""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
JAX_VERSION = '0.12.0.1'
WANTED_STATE = {'stock': 'pristine', 'patched': 'patched'}


def default_dir(variant: str) -> pathlib.Path:
  """`.venvs/bench-<variant>-jax-<version>` in the repository."""
  return ROOT / '.venvs' / f'bench-{variant}-jax-{JAX_VERSION}'


def _migration(python: str, *args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
      [python, '-m', 'migration', *args], cwd=ROOT, text=True,
      capture_output=True, check=False,
      env=dict(os.environ, PYTHONPATH=str(ROOT)))


def status(python: str) -> dict[str, object] | None:
  """`python -m migration status --json`, or None if it cannot run."""
  if not os.path.exists(python):
    return None
  proc = _migration(python, 'status', '--json')
  try:
    return json.loads(proc.stdout)
  except json.JSONDecodeError:
    return None


def describe(python: str) -> str:
  """E.g. `jax 0.12.0.1, patched (jax 0.12.0.1 is patched ... (5/5).)`."""
  st = status(python)
  if st is None:
    return 'state unknown (python -m migration status failed)'
  return f"jax {st['environment']['jax']}, {st['state']}: {st['message']}"


def _log(message: str) -> None:
  print(f'[venv] {message}', file=sys.stderr, flush=True)


def ensure(variant: str, python: str | None) -> str:
  """Returns the Python of the `variant` ('stock' or 'patched') venv.

  Args:
    variant: 'stock' (pristine jax) or 'patched' (the series applied).
    python: An existing interpreter to use, or None for the default venv.

  Raises:
    SystemExit: A given interpreter's jax is not in the expected state, or
      making the default venv failed.
  """
  wanted = WANTED_STATE[variant]
  if python is not None:
    st = status(python)
    if st is None:
      _log(f'{python}: could not check its jax with python -m migration '
           f'status (absl-py and filelock missing?); using it as {variant}.')
    elif st['state'] != wanted:
      raise SystemExit(
          f'--{variant}-python {python}: expected jax {wanted}, found '
          f"{st['state']}: {st['message']}")
    return python

  directory = default_dir(variant)
  python = str(directory / 'bin' / 'python')
  st = status(python)
  usable = (st is not None and st.get('environment', {}).get('jax')
            == JAX_VERSION and st['state'] in ('pristine', 'patched'))
  if usable:
    _log(f'reusing {directory} ({st["state"]})')
  else:
    _log(f'making {directory} (scripts/make_venv.sh {JAX_VERSION})')
    proc = subprocess.run([str(ROOT / 'scripts' / 'make_venv.sh'),
                           JAX_VERSION, str(directory)], check=False)
    if proc.returncode != 0:
      raise SystemExit(f'scripts/make_venv.sh failed for {directory}')
    st = status(python)
  if st is None or st['state'] != wanted:
    command = 'apply' if variant == 'patched' else 'revert'
    _log(f'{directory}: python -m migration {command}')
    proc = _migration(python, command)
    if proc.returncode != 0:
      raise SystemExit(f'python -m migration {command} failed in '
                       f'{directory}:\n{proc.stdout}{proc.stderr}')
  return python
