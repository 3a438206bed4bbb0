"""The target environment: where jax is installed and which versions.

Nothing here imports jax: versions and paths come from ``importlib.metadata``,
read in the running Python or, for ``--python``, in a subprocess of the
named interpreter that runs ``targetenv.py`` (standard library only).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys

from migration import errors
from migration import fsutil
from migration import targetenv

# The PEP 440 local version label of the wheels this project builds.
LABEL_RE = re.compile(r'^(?P<base>[^+]+)\+interpret\.(?P<release>\d+)$')


def split_label(version: str) -> tuple[str, int | None]:
  """Splits ``0.12.0.1+interpret.3`` into ``('0.12.0.1', 3)``.

  Args:
    version: a jax distribution version.

  Returns:
    The upstream version and the release number of the patched wheel, or
    ``(version, None)`` for a version without our label.
  """
  m = LABEL_RE.match(version)
  if m is None:
    return version, None
  return m.group('base'), int(m.group('release'))


@dataclasses.dataclass(frozen=True)
class Environment:
  """The Python environment whose jax is patched.

  Attributes:
    python_version: version of the target Python, e.g. ``3.12.1``.
    jax_version: installed upstream jax version (without our local label),
      or None if jax is not installed.
    jaxlib_version: installed jaxlib version, or None.
    site_packages: directory holding jax's dist-info (and ``jax/``), or None.
    record: RECORD entries of the jax distribution, mapping a path relative
      to ``site_packages`` to its hex sha256 (entries without a hash are left
      out).
    dist_version: the version in jax's dist-info, e.g.
      ``0.12.0.1+interpret.1`` for a patched wheel; None if not installed.
    python: the target interpreter's executable.
    purelib: the target's site-packages for pure-Python packages.
    jax_root: ``site_packages/jax`` with links resolved (the install's
      identity, and where its files are read and written), or None.
  """
  python_version: str
  jax_version: str | None
  jaxlib_version: str | None
  site_packages: str | None
  record: dict[str, str]
  dist_version: str | None = None
  python: str | None = None
  purelib: str | None = None
  jax_root: str | None = None

  @property
  def jax_installed(self) -> bool:
    return self.jax_version is not None

  @property
  def wheel_release(self) -> int | None:
    """The N of an installed ``+interpret.N`` wheel, else None."""
    if self.dist_version is None:
      return None
    return split_label(self.dist_version)[1]

  def path(self, relpath: str) -> str:
    """Returns the absolute path of ``relpath`` inside site-packages.

    Args:
      relpath: a ``/``-separated path under ``jax/`` (from the manifest or
        the journal).

    Raises:
      PatchDataError: ``relpath``, links resolved, is not inside
        site-packages/jax.
    """
    assert self.site_packages is not None
    fsutil.check_relpath(relpath, 'The patch data')
    # Under the resolved jax folder, not through a link to it.
    top = self.jax_root or os.path.join(self.site_packages, 'jax')
    out = os.path.join(top, *relpath.split('/')[1:])
    if not fsutil.inside(os.path.dirname(out), top):
      raise errors.PatchDataError(
          f'{relpath} resolves to {os.path.realpath(out)}, outside '
          f'{self.site_packages}/jax (a link?); nothing was changed.')
    return out

  def warnings(self) -> list[str]:
    """Returns human-readable warnings about the environment."""
    out = []
    if (self.jax_version is not None and
        self.jaxlib_version != self.jax_version):
      out.append(f'jaxlib {self.jaxlib_version or "(not installed)"} does '
                 f'not match jax {self.jax_version}; jax will not import.')
    return out


def _check_report(data: object, source: str) -> dict:
  """Checks the shape of a ``targetenv.probe()`` report.

  Raises:
    EnvironmentProblem: a field is missing or of the wrong type, or jax is
      reported without a site-packages holding a jax ``.dist-info``.
  """
  def bad(why: str) -> errors.EnvironmentProblem:
    return errors.EnvironmentProblem(
        f'{source} reported an unusable environment ({why}); nothing was '
        'changed.')

  if not isinstance(data, dict):
    raise bad('not a JSON object')
  for key in ('python', 'executable', 'purelib'):
    if not isinstance(data.get(key), str):
      raise bad(f'{key!r} missing')
  for key in ('jax', 'jaxlib', 'site_packages'):
    if data.get(key) is not None and not isinstance(data[key], str):
      raise bad(f'{key!r} is not a string')
  for key in ('executable', 'purelib', 'site_packages'):
    if '\0' in (data.get(key) or ''):
      raise bad(f'{key!r} has a NUL byte')
  record = data.get('record')
  if not isinstance(record, dict) or not all(
      isinstance(k, str) and isinstance(v, str) for k, v in record.items()):
    raise bad("'record' missing")
  if data.get('jax') is not None:
    if not re.fullmatch(r'[0-9A-Za-z.+!_-]+', data['jax']):
      raise bad(f'jax version {data["jax"]!r}')
    site = data.get('site_packages')
    if not site or not os.path.isabs(site) or not os.path.isdir(site):
      raise bad(f'site-packages {site!r} is not a directory')
    if not any(n.lower().startswith('jax-') and n.endswith('.dist-info')
               for n in os.listdir(site)):
      raise bad(f'{site} has no jax-*.dist-info')
  return data


def _from_probe(data: dict) -> Environment:
  """The environment of a probe's report, its folders with links resolved.

  Resolved once, here: every later path is built from these, so a link on
  the way to site-packages that someone swaps after the checks
  (``trust``) does not redirect the tool's writes.
  """
  jax = data['jax']
  site = data['site_packages']
  return Environment(
      python_version=data['python'],
      jax_version=split_label(jax)[0] if jax else None,
      jaxlib_version=data['jaxlib'],
      site_packages=os.path.realpath(site) if site else None,
      record=dict(data['record']),
      dist_version=jax,
      python=data['executable'],
      purelib=os.path.realpath(data['purelib']),
      jax_root=(os.path.realpath(os.path.join(site, 'jax')) if site
                else None),
  )


def _probe_subprocess(python: str) -> dict:
  """Runs ``targetenv.probe()`` in the interpreter ``python``.

  ``python`` is made absolute against the current directory first (a bare
  name too, never looked up on PATH): the file checked is the one run,
  although the probe runs in ``/``.
  """
  try:
    python = os.path.abspath(python)
  except OSError as e:  # A relative path, and the current folder is gone.
    raise errors.UsageError(
        f'--python={python}: the current directory is gone ({e}); pass an '
        'absolute path.') from e
  if not (os.path.isfile(python) and os.access(python, os.X_OK)):
    raise errors.UsageError(
        f'--python={python}: not an executable file.')
  # Imported here: trust describes Environments.
  from migration import trust  # pylint: disable=g-import-not-at-top
  python = trust.check_interpreter(python)  # Runs the path it checked.
  source = inspect.getsource(targetenv)
  try:
    # cwd=/ so that nothing in the current directory shadows a module.
    # -I -S: nothing of the environment runs in the probe (its .pth
    # files, PYTHON* variables): it may be another user's (targetenv).
    proc = subprocess.run([python, '-I', '-S', '-c', source], cwd='/',
                          capture_output=True, encoding='utf-8',
                          errors='replace', timeout=60, check=False)
  except (OSError, subprocess.TimeoutExpired) as e:
    raise errors.EnvironmentProblem(
        f'Cannot run {python} to inspect its environment: {e}') from e
  if proc.returncode != 0:
    raise errors.EnvironmentProblem(
        f'{python} failed to report its environment (importlib.metadata '
        f'and sysconfig are needed; Python >= 3.9):\n{proc.stderr.strip()}')
  try:
    data = json.loads(proc.stdout)
  except ValueError as e:
    raise errors.EnvironmentProblem(
        f'{python} printed no environment report: {proc.stdout!r}') from e
  return _check_report(data, python)


def detect(python: str | None = None) -> Environment:
  """Describes the environment of the running Python or of ``python``.

  Args:
    python: the executable of another Python environment to inspect, a
      relative path (or a bare name) taken against the current directory,
      not PATH; None for the running one. jax is never imported in either.

  Returns:
    The detected environment; ``jax_version`` is None if jax is absent.

  Raises:
    UsageError: ``python`` is not an executable.
    EnvironmentProblem: ``python`` cannot report its environment, or
      another user can change it (``trust.check_interpreter``).
  """
  if python is None:
    return _from_probe(_check_report(targetenv.probe(), sys.executable))
  return _from_probe(_probe_subprocess(python))
