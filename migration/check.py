"""Check how a patch series fits pristine jax files: exactly, with offsets,
already upstream, or in conflict (which hunk, and what it expected).

Only exact context counts: git applies a hunk whose context matches
exactly, possibly at another line (an offset); a hunk whose context differs
is a conflict. There is no fuzz.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from typing import Callable, Protocol, Sequence

from migration import enums
from migration import errors
from migration import gitapply
from migration import hunks as hunks_lib
from migration import wheels

_OFFSET_RE = re.compile(r'^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) '
                        r'lines?\)', re.MULTILINE)
_FAILED_RE = re.compile(r'^error: patch failed: (.+):(\d+)$', re.MULTILINE)


class Fit(enums.StrEnum):
  """How one patch fits a tree."""
  EXACT = 'applies'
  OFFSETS = 'applies with offsets'
  UPSTREAM = 'already upstream'
  CONFLICT = 'conflict'


class PatchLike(Protocol):
  name: str
  path: str


@dataclasses.dataclass(frozen=True)
class Conflict:
  """A hunk that does not apply.

  Attributes:
    path: the file.
    hunk: 1-based hunk number within the file.
    line: the line where the hunk expected its context.
    header: the enclosing definition named in the hunk header.
    expected: the lines the hunk expected there.
    found: the lines the file has there (as many as expected).
  """
  path: str
  hunk: int
  line: int
  header: str
  expected: tuple[str, ...]
  found: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class PatchFit:
  """The result for one patch.

  Attributes:
    name: the patch file name.
    fit: how it fits.
    offsets: ``(path, hunk, line, offset)`` of hunks applied at an offset.
    conflicts: the failing hunks (for ``Fit.CONFLICT``).
    message: git's output for a conflict.
  """
  name: str
  fit: Fit
  offsets: tuple[tuple[str, int, int, int], ...] = ()
  conflicts: tuple[Conflict, ...] = ()
  message: str = ''


def _offsets(output: str) -> list[tuple[str, int, int, int]]:
  out = []
  path = ''
  for line in output.splitlines():
    if line.startswith('Checking patch '):
      path = line.split(' ', 2)[2].rstrip('.').split(' ')[0]
      continue
    m = _OFFSET_RE.match(line)
    if m:
      out.append((path, int(m.group(1)), int(m.group(2)), int(m.group(3))))
  return out


def _conflicts(patch: str, directory: str, output: str) -> list[Conflict]:
  with open(patch, encoding='utf-8', errors='replace') as f:
    parsed = hunks_lib.parse(f.read())
  out = []
  seen = set()
  for m in _FAILED_RE.finditer(output):
    path, line = m.group(1), int(m.group(2))
    if (path, line) in seen:
      continue
    seen.add((path, line))
    hunk = hunks_lib.find(parsed, path, line)
    if hunk is None:
      continue
    try:
      with open(os.path.join(directory, *path.split('/')),
                encoding='utf-8', errors='replace') as f:
        lines = f.read().split('\n')
    except FileNotFoundError:
      lines = []
    start = max(line - 1, 0)
    found = tuple(lines[start:start + len(hunk.expected)])
    out.append(Conflict(path, hunk.index, line, hunk.header, hunk.expected,
                        found))
  return out


def check_tree(patches: Sequence[PatchLike], directory: str,
               on_step: Callable[[int, PatchFit], None] | None = None
               ) -> list[PatchFit]:
  """Applies ``patches`` in order to the files in ``directory``.

  A patch that applies is applied (so the next is checked on top of it); one
  whose reverse applies is already upstream and skipped; one that does
  neither is a conflict and skipped.

  Args:
    patches: the series, in order.
    directory: the ``-p1`` root holding the pristine files; modified.
    on_step: called with (number of patches processed, result) after each.

  Returns:
    One result per patch.

  Raises:
    EnvironmentProblem: git is missing.
  """
  out = []
  for i, p in enumerate(patches):
    ok, output = gitapply.try_apply(p.path, directory, check_only=False)
    if ok:
      offsets = _offsets(output)
      fit = PatchFit(p.name, Fit.OFFSETS if offsets else Fit.EXACT,
                     tuple(offsets))
    elif gitapply.try_apply(p.path, directory, reverse=True)[0]:
      fit = PatchFit(p.name, Fit.UPSTREAM)
    else:
      fit = PatchFit(p.name, Fit.CONFLICT, (),
                     tuple(_conflicts(p.path, directory, output)), output)
    out.append(fit)
    if on_step is not None:
      on_step(i + 1, fit)
  return out


@dataclasses.dataclass(frozen=True)
class VersionCheck:
  """The check of one jax release."""
  version: str
  series: str
  served: bool
  wheel: str
  patches: tuple[PatchFit, ...]

  @property
  def ok(self) -> bool:
    return all(p.fit != Fit.CONFLICT for p in self.patches)


def check_version(manifest, version: str,
                  wheel_dirs: tuple[str, ...] = ()) -> VersionCheck:
  """Checks the series for ``version`` against that release's wheel.

  Args:
    manifest: the loaded ``manifest.Manifest``.
    version: a jax release; a version the manifest does not serve is
      checked against the series of the nearest served release.
    wheel_dirs: directories searched for wheels before the cache.

  Returns:
    The per-patch results.

  Raises:
    UnsupportedError: no such jax release on the package index.
    EnvironmentProblem: git is missing or the wheel cannot be fetched.
  """
  wheel = wheels.pristine_wheel(  # Validates `version`.
      version, wheel_dirs, sha256=manifest.wheel_sha256(version))
  series = manifest.series_for(version) or manifest.series_near(version)
  with tempfile.TemporaryDirectory(prefix='jax-interpret-check-') as tmp:
    wheels.extract(wheel, series.files, tmp)
    fits = check_tree(series.patches, tmp)
  return VersionCheck(version, series.name,
                      manifest.series_for(version) is not None,
                      os.path.basename(wheel), tuple(fits))


def check_versions(manifest, versions: Sequence[str],
                   wheel_dirs: tuple[str, ...] = ()) -> list[VersionCheck]:
  """Runs ``check_version`` for each version, in order."""
  if not versions:
    raise errors.UsageError('No jax version to check.')
  return [check_version(manifest, v, wheel_dirs) for v in versions]
