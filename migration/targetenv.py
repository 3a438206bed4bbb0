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
  ``site`` finds them (its venv's, then the base's where there is no venv
  or it includes them) but without running ``.pth`` files; for ``-S``."""
  version = 'python%d.%d' % sys.version_info[:2]
  platlibdir = getattr(sys, 'platlibdir', 'lib')
  libdirs = [platlibdir] + (['lib'] if platlibdir != 'lib' else [])
  venv = None
  here = os.path.dirname(os.path.abspath(sys.executable))
  for d in (here, os.path.dirname(here)):
    if os.path.isfile(os.path.join(d, 'pyvenv.cfg')):
      venv = d  # Python < 3.11 applies a venv in site, not at startup.
      break
  out = []
  base = True
  if venv is not None:
    out += [os.path.join(venv, lib, version, 'site-packages')
            for lib in libdirs]
    with open(os.path.join(venv, 'pyvenv.cfg'), encoding='utf-8') as f:
      base = any(
          line.partition('=')[0].strip().lower()
          == 'include-system-site-packages'
          and line.partition('=')[2].strip().lower() == 'true'
          for line in f)
  if base:
    # The base's, as its own (perhaps a distribution's) scheme says.
    paths = sysconfig.get_paths(vars={'base': sys.base_prefix,
                                      'platbase': sys.base_exec_prefix})
    out += [paths['purelib'], paths['platlib']]
    out += [os.path.join(sys.base_prefix, lib, version, 'site-packages')
            for lib in libdirs]
  return [p for p in dict.fromkeys(out) if os.path.isdir(p)] or out[:1]


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
