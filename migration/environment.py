"""The target environment: where jax is installed and which versions.

Nothing here imports jax: versions and paths come from ``importlib.metadata``.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib.metadata
import os
import platform


@dataclasses.dataclass(frozen=True)
class Environment:
  """The Python environment whose jax is patched.

  Attributes:
    python_version: version of the running Python, e.g. ``3.12.1``.
    jax_version: installed jax version, or None if jax is not installed.
    jaxlib_version: installed jaxlib version, or None.
    site_packages: directory holding jax's dist-info (and ``jax/``), or None.
    record: RECORD entries of the jax distribution, mapping a path relative
      to ``site_packages`` to its hex sha256 (entries without a hash are left
      out).
  """
  python_version: str
  jax_version: str | None
  jaxlib_version: str | None
  site_packages: str | None
  record: dict[str, str]

  @property
  def jax_installed(self) -> bool:
    return self.jax_version is not None

  def path(self, relpath: str) -> str:
    """Returns the absolute path of ``relpath`` inside site-packages."""
    assert self.site_packages is not None
    return os.path.join(self.site_packages, *relpath.split('/'))

  def warnings(self) -> list[str]:
    """Returns human-readable warnings about the environment."""
    out = []
    if (self.jax_version is not None and
        self.jaxlib_version != self.jax_version):
      out.append(f'jaxlib {self.jaxlib_version or "(not installed)"} does '
                 f'not match jax {self.jax_version}; jax will not import.')
    return out


def _version(name: str) -> str | None:
  try:
    return importlib.metadata.version(name)
  except importlib.metadata.PackageNotFoundError:
    return None


def _record_hashes(dist: importlib.metadata.Distribution) -> dict[str, str]:
  out = {}
  for f in dist.files or ():
    if f.hash is None or f.hash.mode != 'sha256':
      continue
    value = f.hash.value
    raw = base64.urlsafe_b64decode(value + '=' * (-len(value) % 4))
    out[f.as_posix()] = raw.hex()
  return out


def detect() -> Environment:
  """Describes the environment of the running Python.

  Returns:
    The detected environment; ``jax_version`` is None if jax is absent.
  """
  try:
    dist = importlib.metadata.distribution('jax')
  except importlib.metadata.PackageNotFoundError:
    return Environment(platform.python_version(), None, _version('jaxlib'),
                       None, {})
  site_packages = os.path.abspath(str(dist.locate_file('')))
  return Environment(
      python_version=platform.python_version(),
      jax_version=dist.version,
      jaxlib_version=_version('jaxlib'),
      site_packages=site_packages,
      record=_record_hashes(dist),
  )
