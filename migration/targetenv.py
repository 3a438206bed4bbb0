"""Probe a Python environment for jax without importing jax.

This module is also run as a script by another interpreter (``--python``),
so it uses only the standard library and syntax that Python 3.9 accepts.
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


def probe():
  """Describes the running Python's jax installation.

  Returns:
    A JSON-able dict: ``python``, ``executable``, ``purelib``, ``jax``
    (the distribution version, or None), ``jaxlib``, ``site_packages``
    (where jax's dist-info is) and ``record`` (path -> hex sha256).
  """
  out = {'python': platform.python_version(),
         'executable': os.path.abspath(sys.executable),
         'purelib': sysconfig.get_paths()['purelib'],
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
  print(json.dumps(probe()))
