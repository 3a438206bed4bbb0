"""Classify the installed interpreter files by their sha256."""

from __future__ import annotations

import dataclasses
import enum

from migration import environment
from migration import manifest as manifest_lib


class Overall(enum.StrEnum):
  """State of the whole installation."""
  NOT_INSTALLED = 'not installed'
  UNSUPPORTED = 'unsupported'
  PRISTINE = 'pristine'
  PATCHED = 'patched'
  PARTLY_PATCHED = 'partly patched'
  LOCALLY_MODIFIED = 'locally modified'
  MIXED = 'mixed'  # Known states, but at different points of the series.


@dataclasses.dataclass(frozen=True)
class FileState:
  """State of one target file.

  Attributes:
    path: path relative to site-packages.
    sha256: current hash, or None if the file is absent.
    applied: the numbers k of applied patches this hash matches (0 is
      pristine); empty if the hash is unknown (locally modified).
    total: number of patches in the series.
    record_sha256: the hash in jax's RECORD, if listed.
  """
  path: str
  sha256: str | None
  applied: tuple[int, ...]
  total: int
  record_sha256: str | None

  @property
  def label(self) -> str:
    if not self.applied:
      return 'locally modified' if self.sha256 else 'missing'
    if 0 in self.applied:
      return 'pristine'
    if self.total in self.applied:
      return 'patched'
    return f'patched {max(self.applied)}/{self.total}'


@dataclasses.dataclass(frozen=True)
class Status:
  """Classification of the environment against the manifest.

  Attributes:
    env: the environment.
    overall: the overall state.
    message: one-line human explanation.
    series: the series serving the installed version, if any.
    applied: number of applied patches when consistent, else None.
    files: per-file states.
  """
  env: environment.Environment
  overall: Overall
  message: str
  series: manifest_lib.Series | None = None
  applied: int | None = None
  files: tuple[FileState, ...] = ()

  @property
  def total(self) -> int:
    return len(self.series.patches) if self.series else 0

  def modified_files(self) -> list[str]:
    return [f.path for f in self.files if not f.applied]


def classify(env: environment.Environment,
             manifest: manifest_lib.Manifest) -> Status:
  """Classifies the target files of ``env``.

  Args:
    env: the environment to inspect.
    manifest: the loaded manifest.

  Returns:
    The status; never raises for an unsupported or modified installation.
  """
  served = ', '.join(manifest.served_versions())
  if not env.jax_installed:
    return Status(env, Overall.NOT_INSTALLED,
                  f'jax is not installed in this environment (Python '
                  f'{env.python_version}); this project serves jax {served}.')
  series = manifest.series_for(env.jax_version)
  if series is None:
    return Status(env, Overall.UNSUPPORTED,
                  f'jax {env.jax_version} is not served by this release; '
                  f'served versions: {served}.')
  hashes = series.hashes[env.jax_version]
  n = len(series.patches)
  files = []
  for path, states in hashes.items():
    current = manifest_lib.sha256_path(env.path(path))
    applied = tuple(k for k, h in enumerate(states) if h == current)
    files.append(FileState(path, current, applied, n, env.record.get(path)))
  for f in files:
    if f.record_sha256 and f.record_sha256 != hashes[f.path][0]:
      return Status(env, Overall.UNSUPPORTED,
                    f'The installed jax {env.jax_version} is not the released '
                    f'wheel: RECORD lists sha256 {f.record_sha256} for '
                    f'{f.path}, the release has {hashes[f.path][0]}.',
                    series, None, tuple(files))
  modified = [f.path for f in files if not f.applied]
  if modified:
    return Status(env, Overall.LOCALLY_MODIFIED,
                  f'Locally modified (unknown content): {", ".join(modified)}.',
                  series, None, tuple(files))
  common = set(range(n + 1))
  for f in files:
    common &= set(f.applied)
  if not common:
    return Status(env, Overall.MIXED,
                  'Files are at different points of the series ('
                  + ', '.join(f'{f.path}: {f.label}' for f in files)
                  + '); an interrupted run or a manual edit.',
                  series, None, tuple(files))
  k = max(common)
  if k == 0:
    overall, msg = Overall.PRISTINE, f'jax {env.jax_version} is pristine.'
  elif k == n:
    overall = Overall.PATCHED
    msg = f'jax {env.jax_version} is patched with {series.name} ({n}/{n}).'
  else:
    overall = Overall.PARTLY_PATCHED
    msg = (f'jax {env.jax_version} is partly patched with {series.name} '
           f'({k}/{n}).')
  return Status(env, overall, msg, series, k, tuple(files))
