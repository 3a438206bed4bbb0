"""Classify the installed interpreter files by their sha256."""

from __future__ import annotations

import dataclasses
import os
import shutil

from absl import logging

from migration import environment
from migration import enums
from migration import errors
from migration import fsutil
from migration import gitapply
from migration import manifest as manifest_lib
from migration import record as record_lib


class PatchState(enums.StrEnum):
  """State of one patch of the series in the installed files."""
  APPLIED = 'applied'
  NOT_APPLIED = 'not applied'
  UPSTREAM = 'merged upstream'
  CONFLICTING = 'conflicting'
  UNKNOWN = 'unknown'


class Overall(enums.StrEnum):
  """State of the whole installation."""
  NOT_INSTALLED = 'not installed'
  UNSUPPORTED = 'unsupported'
  PRISTINE = 'pristine'
  PATCHED = 'patched'
  PARTLY_PATCHED = 'partly patched'
  LOCALLY_MODIFIED = 'locally modified'
  MIXED = 'mixed'  # Known states, but at different points of the series.
  # Patched by an earlier release of this project, whose series has changed.
  OUTDATED = 'patched by an earlier release'


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
    earlier: whether the hash is of the file as an earlier release of this
      project patched it (the manifest's ``superseded``).
  """
  path: str
  sha256: str | None
  applied: tuple[int, ...]
  total: int
  record_sha256: str | None
  earlier: bool = False

  @property
  def label(self) -> str:
    if not self.applied:
      if self.earlier:
        return 'patched by an earlier release'
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
    patches: per-patch states, in series order.
    lost: set when this tool patched the environment and the patches were
      lost since (jax reinstalled or upgraded): what happened.
    wheel: whether jax was installed from this project's patched wheel.
    leftover: files the release does not ship that an earlier apply added
      and a reinstall of jax left behind (pip removes only the files in
      RECORD); the install is pristine otherwise. Apply replaces them,
      revert removes them.
  """
  env: environment.Environment
  overall: Overall
  message: str
  series: manifest_lib.Series | None = None
  applied: int | None = None
  files: tuple[FileState, ...] = ()
  patches: tuple[PatchState, ...] = ()
  lost: str | None = None
  wheel: bool = False
  leftover: tuple[str, ...] = ()

  @property
  def total(self) -> int:
    return len(self.series.patches) if self.series else 0


def _patch_states(env: environment.Environment, series: manifest_lib.Series,
                  applied: int | None) -> tuple[PatchState, ...]:
  """Per patch: applied, not applied, merged upstream or conflicting.

  A consistent state is read off the hashes. Otherwise (modified or mixed
  files) the patches are tried on a copy of the installed files: first each
  applied patch is peeled off, newest first (it reverse-applies), then the
  series is replayed oldest first, so that each patch is checked on top of
  the ones before it. Without git, such patches are ``unknown``.
  """
  upstream = set(series.upstream.get(env.jax_version, ()))
  if applied is not None or shutil.which('git') is None:
    out = []
    for i, p in enumerate(series.patches):
      if p.name in upstream:
        out.append(PatchState.UPSTREAM)
      elif applied is None:
        out.append(PatchState.UNKNOWN)
      else:
        out.append(PatchState.APPLIED if i < applied
                   else PatchState.NOT_APPLIED)
    return tuple(out)
  patches = [p for p in series.patches if p.name not in upstream]
  try:
    found = _try_patches(env, series, patches)
  except (OSError, errors.MigrationError) as e:
    # E.g. a full $TMPDIR: status still reports, with these unknown.
    logging.warning('Cannot try the patches on a copy: %s', e)
    return tuple(PatchState.UPSTREAM if p.name in upstream
                 else PatchState.UNKNOWN for p in series.patches)
  return tuple(found.get(p.name, PatchState.UPSTREAM)
               for p in series.patches)


def _try_patches(env: environment.Environment, series: manifest_lib.Series,
                 patches: list[manifest_lib.Patch]) -> dict[str, PatchState]:
  """``_patch_states`` on a copy of the files in a scratch folder.

  Raises:
    OSError: the copy cannot be made (a full $TMPDIR).
  """
  found: dict[str, PatchState] = {}
  with fsutil.scratch('status') as tmp:
    for f in series.files:
      if os.path.exists(env.path(f)):
        dest = os.path.join(tmp, *f.split('/'))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        manifest_lib.copy_regular(env.path(f), dest)
    for p in reversed(patches):
      if gitapply.try_apply(p.path, tmp, reverse=True, check_only=False)[0]:
        found[p.name] = PatchState.APPLIED
    for p in patches:
      if gitapply.try_apply(p.path, tmp, check_only=False)[0]:
        found.setdefault(p.name, PatchState.NOT_APPLIED)
      else:
        found[p.name] = PatchState.CONFLICTING
  return found


def classify(env: environment.Environment,
             manifest: manifest_lib.Manifest) -> Status:
  """Classifies the target files of ``env`` and checks for lost patches.

  Args:
    env: the environment to inspect.
    manifest: the loaded manifest.

  Returns:
    The status; never raises for an unsupported or modified installation.
  """
  status = _classify(env, manifest)
  patches = ()
  if status.series is not None and status.overall != Overall.UNSUPPORTED:
    patches = _patch_states(env, status.series, status.applied)
  patched = status.overall in (Overall.PATCHED, Overall.PARTLY_PATCHED,
                               Overall.OUTDATED)
  try:
    rec = record_lib.find(env, patched)
  except errors.MigrationError:
    rec = None  # Reported by status; apply and revert refuse it.
  lost = record_lib.lost_message(env, rec,
                                 status.overall == Overall.PRISTINE, patched)
  return dataclasses.replace(status, patches=patches, lost=lost)


def _classify(env: environment.Environment,
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
                  manifest.not_served_message(env.jax_version))
  hashes = series.hashes[env.jax_version]
  superseded = series.superseded.get(env.jax_version, {})
  n = len(series.patches)
  files = []
  for path, states in hashes.items():
    current = manifest_lib.sha256_path(env.path(path))
    applied = tuple(k for k, h in enumerate(states) if h == current)
    files.append(FileState(path, current, applied, n, env.record.get(path),
                           current in superseded.get(path, ())))
  wheel = env.wheel_release is not None
  for f in files:
    released = hashes[f.path][n if wheel else 0]
    if f.record_sha256 and f.record_sha256 != released:
      what = (f'the patched wheel of {series.name} ({n} patches)' if wheel
              else 'the released wheel')
      return Status(env, Overall.UNSUPPORTED,
                    f'The installed jax {env.dist_version} is not {what}: '
                    f'RECORD lists sha256 {f.record_sha256} for {f.path}, '
                    f'expected {released}.', series, None, tuple(files),
                    wheel=wheel)
  # pip removes only the files in RECORD, so a reinstall leaves a module that
  # the series added, with the content it had: not a local change.
  leftover = tuple(f.path for f in files
                   if hashes[f.path][0] is None and f.sha256 is not None
                   and f.record_sha256 is None and (f.applied or f.earlier))
  if leftover and all(0 in f.applied for f in files
                      if f.path not in leftover):
    return Status(env, Overall.PRISTINE,
                  f'jax {env.jax_version} is pristine but for '
                  f'{", ".join(leftover)}, which jax does not ship: left '
                  'from an earlier apply (pip removes only the files it '
                  'installed); apply patches jax, revert removes them.',
                  series, 0, tuple(files), wheel=wheel, leftover=leftover)
  earlier = [f.path for f in files if not f.applied and f.earlier]
  if earlier and all(f.earlier or f.applied for f in files):
    return Status(env, Overall.OUTDATED,
                  f'jax {env.jax_version} is patched by an earlier release of '
                  f'this project ({", ".join(earlier)}): apply updates it to '
                  f'{series.name} ({n}/{n}), revert restores the released '
                  'files.', series, None, tuple(files), wheel=wheel)
  modified = [f.path for f in files if not f.applied]
  if modified:
    return Status(env, Overall.LOCALLY_MODIFIED,
                  f'Locally modified (unknown content): {", ".join(modified)}.',
                  series, None, tuple(files), wheel=wheel)
  common = set(range(n + 1))
  for f in files:
    common &= set(f.applied)
  if not common:
    return Status(env, Overall.MIXED,
                  'Files are at different points of the series ('
                  + ', '.join(f'{f.path}: {f.label}' for f in files)
                  + '); an interrupted run or a manual edit.',
                  series, None, tuple(files), wheel=wheel)
  # Patches a release already contains leave the hashes unchanged, so
  # several k can match: prefer the ends of the series.
  k = n if n in common else 0 if 0 in common else max(common)
  if k == 0:
    overall, msg = Overall.PRISTINE, f'jax {env.jax_version} is pristine.'
  elif k == n:
    overall = Overall.PATCHED
    msg = f'jax {env.jax_version} is patched with {series.name} ({n}/{n}).'
    if wheel:
      msg = (f'jax {env.dist_version} is the patched wheel of release '
             f'{env.wheel_release}: {series.name} ({n}/{n}).')
  else:
    overall = Overall.PARTLY_PATCHED
    msg = (f'jax {env.jax_version} is partly patched with {series.name} '
           f'({k}/{n}).')
  return Status(env, overall, msg, series, k, tuple(files), wheel=wheel)
