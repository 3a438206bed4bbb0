"""Serve a new jax release: port the nearest served release's series to it.

``port --version V`` takes the series of the release the manifest serves
nearest to V (``Manifest.nearest_served``) and tries it on V's released
files (pip's wheel, or one in ``--wheel_dir``):

1. Exactly: if every patch applies exactly (no offset) or is already
   upstream, V joins that series (the manifest lists it there).
2. Otherwise with a 3-way merge: in a scratch repository laid out like
   ``jax_fork/``, the series is applied with ``git am`` to the nearest
   release's files, then each commit is cherry-picked (``git cherry-pick``,
   a 3-way merge) onto a commit of V's released files. If every commit
   merges, the commits are written with ``git format-patch`` as a new series
   ``patches/jax-V/`` whose ``series`` file says what was rebased.

Either way the manifest is regenerated (every series against every release
it serves) and the compatibility table in docs/compatibility.md rewritten,
all in a staged copy that replaces the real files only when everything
succeeded. On a conflict nothing is written and the error names the patch,
file, line and hunk.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import textwrap

from jax_fork import carry
from migration import check
from migration import compat
from migration import errors
from jax_fork import fork
from migration import manifest as manifest_lib
from jax_fork import manifest_gen
from migration import wheels


@dataclasses.dataclass(frozen=True)
class PortResult:
  """What ``port`` did.

  Attributes:
    version: the new release.
    nearest: the served release whose series was ported.
    source_series: that release's series.
    series: the series that now serves ``version`` (``source_series`` when
      it applies exactly, else the new ``jax-VERSION``).
    new_series: whether ``series`` was written.
    fits: per patch of ``source_series``, how it fit V's files before the
      3-way merge (``check.Fit`` values).
    readme: the Markdown file whose table was rewritten, or ''.
    python: V's ``Requires-Python``.
    todo: what a maintainer must still do, one command or step per item.
  """
  version: str
  nearest: str
  source_series: str
  series: str
  new_series: bool
  fits: tuple[tuple[str, str], ...]
  readme: str
  python: str
  todo: tuple[str, ...]


def _note(source: manifest_lib.Series, nearest: str, version: str,
          fits: list[check.PatchFit]) -> list[str]:
  """The ``series`` file comment of a ported series."""
  how = {check.Fit.EXACT: 'unchanged', check.Fit.OFFSETS:
         'differs in offsets only', check.Fit.UPSTREAM: 'already upstream',
         check.Fit.CONFLICT: 'rebased with a 3-way merge'}
  lines = textwrap.wrap(
      f'Ported from {source.name} (jax {nearest}) onto jax {version}\'s '
      f'released files by `python -m jax_fork port` (git cherry-pick, a '
      f'3-way merge):', 76)
  for f in fits:
    lines.append(f'  {f.name.split("-", 1)[0]} {how[f.fit]}.')
  return ['# Applied in order with `git apply -p1` from site-packages (or a '
          'jax checkout).', *(f'# {ln}' for ln in lines)]


def _rebase(source: manifest_lib.Series, nearest: str, version: str,
            wheel_dirs: tuple[str, ...], work: str, out: str) -> list[str]:
  """Cherry-picks the series onto V's files; writes the patches to ``out``.

  Raises:
    ConflictError: a commit does not merge; names patch, file and hunk.
  """
  fork._init(work, 'old')
  fork._git(work, 'config', 'core.abbrev', '7')
  old = fork._commit_series(work, nearest,
                            wheels.pristine_wheel(nearest, wheel_dirs), source)
  fork._git(work, 'switch', '-q', '--orphan', 'new')
  fork._commit_release(work, version,
                       wheels.pristine_wheel(version, wheel_dirs), source)
  commits = fork._git(work, 'rev-list', '--reverse',
                      f'upstream/{nearest}..old').split()
  for commit, patch in zip(commits, old.patches):
    try:
      fork._git(work, 'cherry-pick', '--allow-empty', commit)
    except errors.ConflictError as e:
      if not os.path.exists(os.path.join(work, fork.PACKAGE_DIR, '.git',
                                         'CHERRY_PICK_HEAD')):
        raise
      detail = carry.describe_conflict(work, f'jax {version}', commit,
                                       'the patch')
      detail = detail.replace(f' of {commit[:12]} ', f' of {patch} ')
      raise errors.ConflictError(
          f'{patch} of {source.name} does not merge onto jax '
          f'{version} (3-way merge). Nothing was written.\n{detail}') from e
  return fork._format_series(work, version, 'new', out)


def _ci_todo(manifest: manifest_lib.Manifest, version: str,
             repo: str) -> list[str]:
  """What CI's version lists need after ``manifest`` serves ``version``."""
  newest: dict[tuple, str] = {}
  for v in manifest.served_versions():
    newest[tuple(manifest_lib.version_key(v)[:2])] = v
  line = sorted(newest.values(), key=manifest_lib.version_key, reverse=True)
  todo = []
  defs = os.path.join(repo, 'bazel', 'defs.bzl')
  if os.path.isfile(defs):
    with open(defs, encoding='utf-8') as f:
      m = re.search(r'^JAX_VERSIONS = (\[.*\])$', f.read(), re.MULTILINE)
    want = '[' + ', '.join(f'"{v}"' for v in line) + ']'
    if m and m.group(1) != want:
      todo.append(f'CI: {version} is now the newest served release of its '
                  f'minor line; set JAX_VERSIONS = {want} in '
                  f'bazel/defs.bzl (scripts/bazel_test.sh checks it)')
  if manifest.served_versions()[-1] == version:
    todo.append(f'CI: {version} is the newest served release; make it the '
                f'first run in .ci/run (JAX_VERSION={version} '
                f'scripts/test.sh) and the default of scripts/test.sh')
  todo.append('CI: scripts/served_releases.py reads the manifest, so '
              f'.ci/run patches and tests {version} without an edit')
  return todo


def port(manifest: manifest_lib.Manifest, version: str,
         wheel_dirs: tuple[str, ...] = (),
         readme: str | None = None) -> PortResult:
  """Serves jax ``version`` with the nearest served release's series.

  Args:
    manifest: the loaded manifest; its patches folder is rewritten.
    version: the new jax release, e.g. ``0.12.1``.
    wheel_dirs: directories searched for wheels before the cache (a wheel
      of a release not yet on the index goes here).
    readme: the Markdown file holding the compatibility table; default
      ``docs/compatibility.md`` beside the patches folder, if there is
      one.

  Returns:
    What was done, and what a maintainer must still do.

  Raises:
    UsageError: ``version`` is already served or not a version number, or
      ``patches/jax-VERSION`` exists.
    UnsupportedError: no such jax release on the index or in ``wheel_dirs``.
    ConflictError: a hunk does not merge; nothing was written.
    PatchDataError: the regenerated manifest fails (nothing was written).
    EnvironmentProblem: git is missing or a wheel cannot be fetched.
  """
  served = manifest.series_for(version)
  if served is not None:
    raise errors.UsageError(
        f'jax {version} is already served by {served.name}. Nothing was '
        f'changed.')
  wheel = wheels.pristine_wheel(version, wheel_dirs)
  nearest = manifest.nearest_served(version)
  source = manifest.series_for(nearest)
  assert source is not None
  patches_dir = manifest.patches_dir
  repo = os.path.dirname(patches_dir)
  if readme is None:
    candidate = os.path.join(repo, compat.DEFAULT_DOC)
    readme = candidate if os.path.isfile(candidate) else ''
  name = f'jax-{version}'
  with tempfile.TemporaryDirectory(prefix='jax-interpret-port-') as tmp:
    files = os.path.join(tmp, 'files')
    wheels.extract(wheel, source.files, files)
    fits = check.check_tree(source.patches, files)
    exact = all(f.fit in (check.Fit.EXACT, check.Fit.UPSTREAM) for f in fits)
    staged = os.path.join(tmp, 'patches')
    shutil.copytree(patches_dir, staged)
    if exact:
      series_name = source.name
      manifest_gen.generate(
          staged, serve={source.name: [*source.hashes, version]},
          wheel_dirs=wheel_dirs)
      changed = {}
    else:
      series_name = name
      if os.path.exists(os.path.join(patches_dir, name)):
        raise errors.UsageError(
            f'{os.path.join(patches_dir, name)} already exists. Nothing was '
            f'changed.')
      out = os.path.join(tmp, 'new')
      names = _rebase(source, nearest, version, wheel_dirs,
                      os.path.join(tmp, 'fork'), out)
      sdir = os.path.join(staged, name)
      os.makedirs(sdir)
      for n in names:
        shutil.copyfile(os.path.join(out, n), os.path.join(sdir, n))
      with open(os.path.join(sdir, manifest_lib.SERIES), 'w',
                encoding='utf-8') as f:
        f.write('\n'.join([*_note(source, nearest, version, fits), *names])
                + '\n')
      manifest_gen.generate(staged, serve={name: [version]},
                            wheel_dirs=wheel_dirs)
      changed = {name: []}
    new_manifest = manifest_lib.load(staged)
    table_text = None
    if readme:
      results = check.check_versions(
          new_manifest, new_manifest.served_versions(), wheel_dirs)
      feats = compat.features(new_manifest)
      table = compat.rows(new_manifest, results, feats, wheel_dirs)
      with open(readme, encoding='utf-8') as f:
        table_text = compat.replace_block(
            f.read(), compat.markdown(feats, table), readme)
    # Everything is staged; write it.
    fork.install_staged(patches_dir, staged, changed)
    if table_text is not None:
      with open(readme + '.tmp', 'w', encoding='utf-8') as f:
        f.write(table_text)
      os.replace(readme + '.tmp', readme)
  python = wheels.requirements(wheel).python
  todo = [f'Run the interpreter tests and the examples on jax {version}: '
          f'JAX_VERSION={version} TEST_SCOPE=kernels scripts/test.sh',
          f'Check the version: python -m migration check --version={version}',
          *_ci_todo(new_manifest, version, repo)]
  if not exact:
    todo.append(f'Review {os.path.join(patches_dir, name)} (its series '
                f'note says what was rebased), then recreate the fork: '
                f'python -m jax_fork fork --all')
  todo.append('Check the drift between series (CI runs it): python -m '
              'jax_fork drift')
  todo.append('Add the release to RELEASE_NOTES.md; commit patches/ and '
              f'{compat.DEFAULT_DOC}')
  return PortResult(version, nearest, source.name, series_name, not exact,
                    tuple((f.name, str(f.fit)) for f in fits),
                    readme or '', python, tuple(todo))
