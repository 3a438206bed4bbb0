"""The maintainers' fork: materialize ``jax_fork/`` and refresh patches.

``fork`` turns ``jax_fork/`` into the working tree of a git repository whose
git directory is ``jax_fork/jax/.git`` (git ignores that folder for this
repository, so upstream's files are never committed here). Its first commit
holds the released files of the interpreter package (from pip's wheel of the
pinned version), tagged ``upstream/VERSION``; then ``git am`` adds one
commit per patch of the series. Run git inside ``jax_fork/jax/``.

``refresh`` writes the commits after the tag back as the series with
``git format-patch -N --zero-commit --no-signature`` (their messages, with
the DEP-3 headers, are kept as they are), then regenerates the manifest; if
the new series does not apply to every served release, nothing is written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import zipfile

from migration import errors
from migration import gitapply
from migration import manifest as manifest_lib
from jax_fork import manifest_gen
from migration import wheels

PACKAGE_DIR = 'jax'  # Holds the repository's .git; ignored by this repo.
IDENTITY = {'GIT_COMMITTER_NAME': 'jax-interpret-patches',
            'GIT_COMMITTER_EMAIL': 'jax-interpret-patches@localhost'}


@dataclasses.dataclass(frozen=True)
class ForkInfo:
  """What ``fork`` made, or what ``refresh`` wrote."""
  fork_dir: str
  version: str
  series: str
  patches: tuple[str, ...]


def _git(fork_dir: str, *args: str,
         env: dict[str, str] | None = None) -> str:
  git = gitapply.git_executable()
  full_env = dict(os.environ)
  for k in ('GIT_DIR', 'GIT_WORK_TREE', 'GIT_INDEX_FILE'):
    full_env.pop(k, None)
  # The maintainer's global git settings (diff.algorithm, diff.noprefix,
  # commit.gpgsign, ...) must not change the patches or stop a rebase.
  full_env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM='1')
  full_env.update(IDENTITY)
  full_env.update(env or {})
  cmd = [git, f'--git-dir={os.path.join(fork_dir, PACKAGE_DIR, ".git")}',
         f'--work-tree={fork_dir}', *args]
  proc = subprocess.run(cmd, cwd=fork_dir, env=full_env, capture_output=True,
                        text=True, check=False)
  if proc.returncode != 0:
    raise errors.ConflictError(
        f'git {" ".join(args)} failed in {fork_dir}:\n'
        f'{(proc.stderr or proc.stdout).strip()}')
  return proc.stdout


def _members(wheel: str, files: tuple[str, ...]) -> list[str]:
  """Every file of the wheel in the folders of ``files``."""
  dirs = {f.rsplit('/', 1)[0] + '/' for f in files}
  with zipfile.ZipFile(wheel) as zf:
    return sorted(n for n in zf.namelist()
                  if not n.endswith('/') and
                  any(n.startswith(d) and '/' not in n[len(d):]
                      for d in dirs))


def materialize(manifest: manifest_lib.Manifest, fork_dir: str,
                version: str | None = None,
                wheel_dirs: tuple[str, ...] = ()) -> ForkInfo:
  """Creates the fork repository in ``fork_dir`` (see the module docstring).

  Args:
    manifest: the loaded manifest.
    fork_dir: the fork's folder, e.g. ``<repo>/jax_fork``.
    version: the upstream release; default the newest served one.
    wheel_dirs: directories searched for wheels before the cache.

  Returns:
    What was made.

  Raises:
    UnsupportedError: ``version`` is not served.
    ModifiedError: ``fork_dir/jax`` already exists (it may hold work).
    EnvironmentProblem: git is missing or the wheel cannot be fetched.
    ConflictError: ``git am`` failed.
  """
  version = version or manifest.served_versions()[-1]
  series = manifest.series_for(version)
  if series is None:
    raise errors.UnsupportedError(manifest.not_served_message(version))
  package = _new_package(fork_dir)
  wheel = wheels.pristine_wheel(version, wheel_dirs)
  os.makedirs(fork_dir, exist_ok=True)
  try:
    _init(fork_dir, series.name)
    return _commit_series(fork_dir, version, wheel, series)
  except BaseException:
    shutil.rmtree(package, ignore_errors=True)
    raise


def _new_package(fork_dir: str) -> str:
  """Returns ``fork_dir/jax``, which the fork's git repository will be.

  Raises:
    EnvironmentProblem: git is missing.
    ModifiedError: ``fork_dir/jax`` already exists (it may hold work).
  """
  gitapply.git_executable()
  package = os.path.join(fork_dir, PACKAGE_DIR)
  if os.path.exists(package):
    raise errors.ModifiedError(
        f'{package} already exists and may hold unrefreshed work; run '
        f'refresh, or delete it to start over. Nothing was changed.')
  return package


def _init(fork_dir: str, branch: str) -> None:
  """Makes ``fork_dir/jax`` the fork's git repository, on ``branch``."""
  package = os.path.join(fork_dir, PACKAGE_DIR)
  os.makedirs(package)
  _git(fork_dir, 'init', '-q', '-b', branch)
  # Relative, so that the fork can be moved; git finds it from jax/.
  _git(fork_dir, 'config', 'core.worktree', '../..')
  with open(os.path.join(package, '.git', 'info', 'exclude'), 'a',
            encoding='utf-8') as f:
    f.write(f'# Only upstream files live here.\n/*\n!/{PACKAGE_DIR}/\n')


def _commit_series(fork_dir: str, version: str, wheel: str,
                   series: manifest_lib.Series) -> ForkInfo:
  """Commits a release's files, then one commit per patch it needs.

  The first commit holds the released files of ``series``' folders, tagged
  ``upstream/VERSION`` (``_commit_release``); ``git am`` adds the patches
  ``version`` needs.

  Args:
    fork_dir: the fork's folder; its repository is on the branch to commit
      to.
    version: the release whose files ``wheel`` holds.
    wheel: pip's wheel of jax ``version``.
    series: the series.

  Returns:
    What was committed.

  Raises:
    ConflictError: ``git am`` failed.
  """
  _commit_release(fork_dir, version, wheel, series)
  patches = series.to_apply(version)
  if patches:
    _git(fork_dir, 'am', '-q', '--keep-non-patch',
         '--committer-date-is-author-date', *(p.path for p in patches))
  return ForkInfo(fork_dir, version, series.name,
                  tuple(p.name for p in patches))


def _commit_release(fork_dir: str, version: str, wheel: str,
                    series: manifest_lib.Series) -> None:
  """Commits the released files of ``series``' folders; tags the commit."""
  wheels.extract(wheel, _members(wheel, series.files), fork_dir)
  _git(fork_dir, 'add', '-A', PACKAGE_DIR)
  stamp = {'GIT_AUTHOR_NAME': 'The JAX Authors',
           'GIT_AUTHOR_EMAIL': 'jax-dev@google.com',
           'GIT_AUTHOR_DATE': '2000-01-01T00:00:00Z',
           'GIT_COMMITTER_DATE': '2000-01-01T00:00:00Z'}
  _git(fork_dir, 'commit', '-q', '--no-verify', '-m',
       f'jax {version} as released ({os.path.basename(wheel)}).', env=stamp)
  _git(fork_dir, 'tag', f'upstream/{version}')


def _upstream_tag(fork_dir: str, rev: str = 'HEAD') -> str:
  """Returns ``VERSION`` of the one ``upstream/VERSION`` tag below ``rev``."""
  tags = _git(fork_dir, 'tag', '--merged', rev, '--list',
              'upstream/*').split()
  if len(tags) != 1:
    raise errors.PatchDataError(
        f'{fork_dir}: expected one upstream/VERSION tag below {rev}, found '
        f'{tags}.')
  return tags[0].split('/', 1)[1]


def _require_clean(fork_dir: str) -> None:
  """Raises ModifiedError if the fork has uncommitted or unfinished work."""
  git_dir = os.path.join(fork_dir, PACKAGE_DIR, '.git')
  for marker in ('rebase-merge', 'rebase-apply', 'CHERRY_PICK_HEAD',
                 'MERGE_HEAD'):
    if os.path.exists(os.path.join(git_dir, marker)):
      raise errors.ModifiedError(
          f'{fork_dir} has a rebase, am, cherry-pick or merge in progress; '
          f'finish or abort it first. Nothing was changed.')
  dirty = _git(fork_dir, 'status', '--porcelain', '--untracked-files=no')
  if dirty.strip():
    raise errors.ModifiedError(
        f'{fork_dir} has uncommitted changes; commit them (one commit per '
        f'patch) and try again. Nothing was changed:\n{dirty.rstrip()}')


def _require_fork(fork_dir: str) -> None:
  if not os.path.isdir(os.path.join(fork_dir, PACKAGE_DIR, '.git')):
    raise errors.UsageError(
        f'No fork in {fork_dir}; run `python -m jax_fork fork` first.')


def _format_series(fork_dir: str, version: str, rev: str,
                   out: str) -> list[str]:
  """Writes the commits ``upstream/version..rev`` as patches into ``out``."""
  _git(fork_dir, 'format-patch', '-q', '-N', '--zero-commit',
       '--no-signature', '-o', out, f'upstream/{version}..{rev}')
  names = sorted(os.listdir(out)) if os.path.isdir(out) else []
  if not names:
    raise errors.PatchDataError(
        f'{fork_dir}: {rev} has no commits after upstream/{version}.')
  return names


def _stage_series(staged: str, series_name: str, out: str,
                  names: list[str]) -> list[str]:
  """Replaces series ``series_name`` of the staged patches folder.

  Returns:
    The patch names the series had before.
  """
  sdir = os.path.join(staged, series_name)
  old = manifest_lib.read_series_file(sdir)
  for name in old:
    os.remove(os.path.join(sdir, name))
  for name in names:
    shutil.copyfile(os.path.join(out, name), os.path.join(sdir, name))
  with open(os.path.join(sdir, manifest_lib.SERIES), encoding='utf-8') as f:
    comments = [ln for ln in f.read().splitlines()
                if ln.lstrip().startswith('#')]
  with open(os.path.join(sdir, manifest_lib.SERIES), 'w',
            encoding='utf-8') as f:
    f.write('\n'.join([*comments, *names]) + '\n')
  return old


def _replace(src: str, dst: str) -> None:
  """Copies ``src`` over ``dst`` atomically (a temporary file, then rename)."""
  shutil.copyfile(src, dst + '.tmp')
  os.replace(dst + '.tmp', dst)


def install_staged(patches_dir: str, staged: str,
                   series: dict[str, list[str]]) -> None:
  """Copies staged series and the staged manifest into ``patches_dir``.

  Args:
    patches_dir: the real patches folder.
    staged: a full copy of it whose manifest has been regenerated.
    series: series name -> the patch names it had before (files no longer
      listed are removed); a series new in ``staged`` maps to ``[]``.
  """
  for name, old in series.items():
    sdir = os.path.join(staged, name)
    target = os.path.join(patches_dir, name)
    os.makedirs(target, exist_ok=True)
    names = manifest_lib.read_series_file(sdir)
    for n in old:
      if n not in names:
        os.remove(os.path.join(target, n))
    for n in [*names, manifest_lib.SERIES]:
      _replace(os.path.join(sdir, n), os.path.join(target, n))
  _replace(os.path.join(staged, manifest_lib.MANIFEST),
           os.path.join(patches_dir, manifest_lib.MANIFEST))


def refresh(manifest: manifest_lib.Manifest, fork_dir: str,
            wheel_dirs: tuple[str, ...] = ()) -> ForkInfo:
  """Regenerates the series of the checked-out branch, then the manifest.

  The series is the one serving the release tagged ``upstream/VERSION``
  below ``HEAD`` (the fork of ``fork``, or one branch of ``fork --all``).

  Args:
    manifest: the loaded manifest (its patches directory is rewritten).
    fork_dir: the fork's folder.
    wheel_dirs: directories searched for wheels before the cache.

  Returns:
    What was written.

  Raises:
    UsageError: there is no fork in ``fork_dir``.
    ModifiedError: the fork has uncommitted changes.
    PatchDataError: the new series does not apply to a served release.
    EnvironmentProblem: git is missing.
  """
  _require_fork(fork_dir)
  version = _upstream_tag(fork_dir)
  series = manifest.series_for(version)
  if series is None:
    raise errors.UnsupportedError(
        f'The fork is of jax {version}, which the manifest does not serve.')
  _require_clean(fork_dir)
  patches_dir = manifest.patches_dir
  with tempfile.TemporaryDirectory(prefix='jax-interpret-refresh-') as tmp:
    out = os.path.join(tmp, 'new')
    names = _format_series(fork_dir, version, 'HEAD', out)
    # Stage a full copy of the patches folder; regenerate its manifest there
    # (this checks the series against every served release), then swap.
    staged = os.path.join(tmp, 'patches')
    shutil.copytree(patches_dir, staged)
    old = _stage_series(staged, series.name, out, names)
    manifest_gen.generate(staged, wheel_dirs=wheel_dirs)
    install_staged(patches_dir, staged, {series.name: old})
  return ForkInfo(fork_dir, version, series.name, tuple(names))


def base_version(series: manifest_lib.Series) -> str:
  """The release a series' branch starts from: the oldest one it serves."""
  return sorted(series.hashes, key=manifest_lib.version_key)[0]


def _by_base(manifest: manifest_lib.Manifest) -> list[manifest_lib.Series]:
  """The series, oldest base release first."""
  return sorted(manifest.series.values(),
                key=lambda s: manifest_lib.version_key(base_version(s)))


def materialize_all(manifest: manifest_lib.Manifest, fork_dir: str,
                    wheel_dirs: tuple[str, ...] = ()) -> list[ForkInfo]:
  """Creates the fork repository with one branch per series.

  Branch ``jax-X`` (the series' name) starts at an orphan commit of the
  released interpreter files of the oldest release the series serves,
  tagged ``upstream/VERSION``; ``git am`` adds one commit per patch. The
  newest series' branch is checked out.

  Args:
    manifest: the loaded manifest.
    fork_dir: the fork's folder, e.g. ``<repo>/jax_fork``.
    wheel_dirs: directories searched for wheels before the cache.

  Returns:
    What was made, one entry per branch, oldest first.

  Raises:
    ModifiedError: ``fork_dir/jax`` already exists (it may hold work).
    PatchDataError: a patch is already upstream in a series' base release
      (its branch could not carry it).
    EnvironmentProblem: git is missing or a wheel cannot be fetched.
    ConflictError: ``git am`` failed.
  """
  package = _new_package(fork_dir)
  ordered = _by_base(manifest)
  for s in ordered:
    skipped = set(s.upstream.get(base_version(s), ()))
    if skipped:
      raise errors.PatchDataError(
          f'{s.name}: {", ".join(sorted(skipped))} already upstream in jax '
          f'{base_version(s)}; its branch could not carry them.')
  wheel_paths = [wheels.pristine_wheel(base_version(s), wheel_dirs)
                 for s in ordered]
  os.makedirs(fork_dir, exist_ok=True)
  out = []
  try:
    for i, (s, wheel) in enumerate(zip(ordered, wheel_paths)):
      if i == 0:
        _init(fork_dir, s.name)
        # Stable abbreviated blob ids in the patches' index lines.
        _git(fork_dir, 'config', 'core.abbrev', '7')
      else:
        _git(fork_dir, 'switch', '-q', '--orphan', s.name)
      out.append(_commit_series(fork_dir, base_version(s), wheel, s))
    newest = manifest.series_for(manifest.served_versions()[-1])
    _git(fork_dir, 'checkout', '-q', newest.name)
  except BaseException:
    shutil.rmtree(package, ignore_errors=True)
    raise
  return out


def series_branches(manifest: manifest_lib.Manifest,
                    fork_dir: str) -> list[tuple[manifest_lib.Series, str]]:
  """Returns (series, its upstream release) per branch of a ``fork --all``.

  Raises:
    UsageError: there is no fork, or it lacks a branch for some series.
  """
  _require_fork(fork_dir)
  branches = set(_git(fork_dir, 'for-each-ref', '--format=%(refname:short)',
                      'refs/heads/').split())
  missing = [s.name for s in manifest.series.values()
             if s.name not in branches]
  if missing:
    raise errors.UsageError(
        f'{fork_dir} has no branch for {", ".join(missing)}; it was not '
        f'made by `python -m jax_fork fork --all`.')
  return [(s, _upstream_tag(fork_dir, s.name)) for s in _by_base(manifest)]


def refresh_all(manifest: manifest_lib.Manifest, fork_dir: str,
                wheel_dirs: tuple[str, ...] = ()) -> list[ForkInfo]:
  """Regenerates every series from its branch, then the manifest.

  All or nothing: every series is staged in a copy of the patches folder and
  the manifest regenerated there (which applies every series to every
  release it serves); only if that succeeds are the files replaced.

  Args:
    manifest: the loaded manifest (its patches directory is rewritten).
    fork_dir: the fork's folder, made by ``materialize_all``.
    wheel_dirs: directories searched for wheels before the cache.

  Returns:
    What was written, one entry per series, oldest first.

  Raises:
    UsageError: there is no fork or a series has no branch.
    ModifiedError: the fork has uncommitted or unfinished work.
    PatchDataError: a new series does not apply to a release it serves.
    EnvironmentProblem: git is missing or a wheel cannot be fetched.
  """
  pairs = series_branches(manifest, fork_dir)
  _require_clean(fork_dir)
  patches_dir = manifest.patches_dir
  out = []
  with tempfile.TemporaryDirectory(prefix='jax-interpret-refresh-') as tmp:
    staged = os.path.join(tmp, 'patches')
    shutil.copytree(patches_dir, staged)
    olds = {}
    for s, version in pairs:
      new = os.path.join(tmp, 'new', s.name)
      names = _format_series(fork_dir, version, s.name, new)
      olds[s.name] = _stage_series(staged, s.name, new, names)
      out.append(ForkInfo(fork_dir, version, s.name, tuple(names)))
    manifest_gen.generate(staged, wheel_dirs=wheel_dirs)
    install_staged(patches_dir, staged, olds)
  return out
