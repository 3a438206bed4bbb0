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
  gitapply.git_executable()
  package = os.path.join(fork_dir, PACKAGE_DIR)
  if os.path.exists(package):
    raise errors.ModifiedError(
        f'{package} already exists and may hold unrefreshed work; run '
        f'refresh, or delete it to start over. Nothing was changed.')
  wheel = wheels.pristine_wheel(version, wheel_dirs)
  os.makedirs(fork_dir, exist_ok=True)
  try:
    wheels.extract(wheel, _members(wheel, series.files), fork_dir)
    _git(fork_dir, 'init', '-q', '-b', series.name)
    # Relative, so that the fork can be moved; git finds it from jax/.
    _git(fork_dir, 'config', 'core.worktree', '../..')
    with open(os.path.join(package, '.git', 'info', 'exclude'), 'a',
              encoding='utf-8') as f:
      f.write(f'# Only upstream files live here.\n/*\n!/{PACKAGE_DIR}/\n')
    _git(fork_dir, 'add', '-A', PACKAGE_DIR)
    stamp = {'GIT_AUTHOR_NAME': 'The JAX Authors',
             'GIT_AUTHOR_EMAIL': 'jax-dev@google.com',
             'GIT_AUTHOR_DATE': '2000-01-01T00:00:00Z',
             'GIT_COMMITTER_DATE': '2000-01-01T00:00:00Z'}
    _git(fork_dir, 'commit', '-q', '--no-verify', '-m',
         f'jax {version} as released ({os.path.basename(wheel)}).',
         env=stamp)
    _git(fork_dir, 'tag', f'upstream/{version}')
    patches = series.to_apply(version)
    if patches:
      _git(fork_dir, 'am', '-q', '--keep-non-patch',
           '--committer-date-is-author-date', *(p.path for p in patches))
  except BaseException:
    shutil.rmtree(package, ignore_errors=True)
    raise
  return ForkInfo(fork_dir, version, series.name,
                  tuple(p.name for p in patches))


def _fork_version(fork_dir: str) -> str:
  tags = _git(fork_dir, 'tag', '--list', 'upstream/*').split()
  if len(tags) != 1:
    raise errors.PatchDataError(
        f'{fork_dir}: expected one upstream/VERSION tag, found {tags}.')
  return tags[0].split('/', 1)[1]


def refresh(manifest: manifest_lib.Manifest, fork_dir: str,
            wheel_dirs: tuple[str, ...] = ()) -> ForkInfo:
  """Regenerates the series from the fork's commits, then the manifest.

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
  if not os.path.isdir(os.path.join(fork_dir, PACKAGE_DIR, '.git')):
    raise errors.UsageError(
        f'No fork in {fork_dir}; run `python -m migration fork` first.')
  version = _fork_version(fork_dir)
  series = manifest.series_for(version)
  if series is None:
    raise errors.UnsupportedError(
        f'The fork is of jax {version}, which the manifest does not serve.')
  dirty = _git(fork_dir, 'status', '--porcelain', '--untracked-files=no')
  if dirty.strip():
    raise errors.ModifiedError(
        f'{fork_dir} has uncommitted changes; commit them (one commit per '
        f'patch) and refresh again. Nothing was changed:\n{dirty.rstrip()}')
  patches_dir = manifest.patches_dir
  with tempfile.TemporaryDirectory(prefix='jax-interpret-refresh-') as tmp:
    out = os.path.join(tmp, 'new')
    _git(fork_dir, 'format-patch', '-q', '-N', '--zero-commit',
         '--no-signature', '-o', out, f'upstream/{version}..HEAD')
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    if not names:
      raise errors.PatchDataError(
          f'{fork_dir} has no commits after upstream/{version}.')
    # Stage a full copy of the patches folder; regenerate its manifest there
    # (this checks the series against every served release), then swap.
    staged = os.path.join(tmp, 'patches')
    shutil.copytree(patches_dir, staged)
    sdir = os.path.join(staged, series.name)
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
    manifest_lib.generate(staged, wheel_dirs=wheel_dirs)
    target = os.path.join(patches_dir, series.name)
    for name in old:
      if name not in names:
        os.remove(os.path.join(target, name))
    for name in [*names, manifest_lib.SERIES]:
      shutil.copyfile(os.path.join(sdir, name),
                      os.path.join(target, name + '.tmp'))
      os.replace(os.path.join(target, name + '.tmp'),
                 os.path.join(target, name))
    shutil.copyfile(os.path.join(staged, manifest_lib.MANIFEST),
                    os.path.join(patches_dir, manifest_lib.MANIFEST + '.tmp'))
    os.replace(os.path.join(patches_dir, manifest_lib.MANIFEST + '.tmp'),
               os.path.join(patches_dir, manifest_lib.MANIFEST))
  return ForkInfo(fork_dir, version, series.name, tuple(names))
