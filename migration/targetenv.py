"""Probe a Python environment for jax without importing jax.

This module is also run as a script by another interpreter (``--python``),
so it uses only the standard library and syntax that Python 3.9 accepts;
only when the tool imports it, its errors are the tool's (exit code 5).
That interpreter runs with ``-I -S``: no ``site`` module, so none of its
``.pth`` files (code of whoever can write its site-packages) runs in the
tool's process, which may be root's; the probe finds its site-packages
itself (``_site_packages``), as ``site`` would, without running them.
"""

import base64
import importlib.metadata
import json
import os
import platform
import sys
import sysconfig


def _version(name):
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def _record_hashes(dist):
  out = {}
  for f in dist.files or ():
    if f.hash is None or f.hash.mode != 'sha256':
      continue
    value = f.hash.value
    raw = base64.urlsafe_b64decode(value + '=' * (-len(value) % 4))
    out[f.as_posix()] = raw.hex()
  return out


if __name__ == '__main__':  # Run by another interpreter (--python).
  _Base = Exception
else:  # Imported by the tool: its exit code 5.
  from migration import errors  # pylint: disable=g-import-not-at-top
  _Base = errors.EnvironmentProblem


class ProbeError(_Base):
  """The installed packages cannot be read (a path over PATH_MAX, EIO)."""


def probe():
  """Describes the running Python's jax installation.

  Returns:
    A JSON-able dict: ``python``, ``executable``, ``purelib``, ``jax``
    (the distribution version, or None), ``jaxlib``, ``site_packages``
    (where jax's dist-info is) and ``record`` (path -> hex sha256).

  Raises:
    ProbeError: the installed packages cannot be read; run as a script,
      the probe prints this error to stderr and exits 1.
  """
  try:
    return _probe()
  except OSError as e:
    raise ProbeError(
        f'Cannot read the packages installed for {sys.executable} ({e}); '
        'nothing was changed.') from e


def _site_packages():
  """This interpreter's site-packages folders, purelib first, found as
  ``site`` does (its venv's, then the base's if the venv includes them)
  but without running ``.pth`` files; for ``-S``."""
  prefixes = [sys.prefix]
  here = os.path.dirname(os.path.abspath(sys.executable))
  for d in (here, os.path.dirname(here)):
    cfg = os.path.join(d, 'pyvenv.cfg')
    if os.path.isfile(cfg):
      # Python < 3.11 applies a venv in site, not at startup.
      prefixes = [d]
      with open(cfg, encoding='utf-8') as f:
        for line in f:
          key, _, value = line.partition('=')
          if (key.strip().lower() == 'include-system-site-packages'
              and value.strip().lower() == 'true'):
            prefixes.append(sys.base_prefix)
      break
  out = []
  for prefix in prefixes:
    paths = sysconfig.get_paths(vars={'base': prefix, 'platbase': prefix})
    out += [paths['purelib'], paths['platlib']]
  return list(dict.fromkeys(out))


def _probe():
  purelib = sysconfig.get_paths()['purelib']
  if sys.flags.no_site:
    site_packages = _site_packages()
    purelib = site_packages[0]
    sys.path.extend(p for p in site_packages if p not in sys.path)
  out = {'python': platform.python_version(),
         'executable': os.path.abspath(sys.executable),
         'purelib': purelib,
         'jax': None, 'jaxlib': _version('jaxlib'), 'site_packages': None,
         'record': {}}
  try:
    dist = importlib.metadata.distribution('jax')
  except importlib.metadata.PackageNotFoundError:
    return out
  out['jax'] = dist.version
  out['site_packages'] = os.path.abspath(str(dist.locate_file('')))
  out['record'] = _record_hashes(dist)
  return out


if __name__ == '__main__':
  try:
    print(json.dumps(probe()))
  except ProbeError as e:
    sys.stderr.write(f'{e}\n')
    sys.exit(1)
