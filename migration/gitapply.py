"""A thin wrapper over ``git apply``; never fuzzes.

Patches are applied with ``-p1`` and git's default of exact context: no
``-C``, no ``--3way``, no ``--recount``. A hunk that does not apply is a
conflict, reported with git's own message (which names the file and line).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from migration import errors


def git_executable() -> str:
  """Returns the path of git.

  Raises:
    EnvironmentProblem: git is not on PATH.
  """
  git = shutil.which('git')
  if git is None:
    raise errors.EnvironmentProblem(
        'git is not installed or not on PATH; the migration tool applies '
        'patches with `git apply`. Install git and retry.')
  return git


# Settings that change what ``git apply`` writes or accepts, pinned with
# ``-c`` (which also holds for a git older than 2.32, where
# GIT_CONFIG_GLOBAL is not read).
_PINNED_CONFIG = ('core.autocrlf=false', 'core.eol=lf', 'core.safecrlf=false',
                  'apply.whitespace=nowarn', 'apply.ignoreWhitespace=no')


def git_env(cwd: str) -> dict[str, str]:
  """The environment of every git call of the tool (``run``).

  The user's and the system's git configuration are ignored
  (``GIT_CONFIG_GLOBAL=/dev/null``, ``GIT_CONFIG_NOSYSTEM=1``, and no
  ``GIT_CONFIG_PARAMETERS``/``GIT_CONFIG_COUNT`` from the caller): e.g.
  ``core.autocrlf = true`` in ``~/.gitconfig`` would make ``git apply``
  write CRLF line endings. git never discovers a repository above ``cwd``.

  Args:
    cwd: the directory git runs in.

  Returns:
    A copy of ``os.environ`` with those changes.
  """
  env = {k: v for k, v in os.environ.items()
         if not k.startswith('GIT_CONFIG')
         and k not in ('GIT_DIR', 'GIT_WORK_TREE', 'GIT_INDEX_FILE')}
  # Never let git discover a repository above the staging directory: inside
  # a work tree, `git apply` resolves paths against the repository root.
  env['GIT_CEILING_DIRECTORIES'] = os.path.dirname(os.path.abspath(cwd))
  env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM='1')
  return env


def run(args: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
  """Runs ``git ARGS`` in ``cwd`` with ``git_env`` and pinned settings.

  Args:
    args: git's arguments, e.g. ``['apply', '--check', PATCH]``.
    cwd: the directory to run in.

  Returns:
    The finished process (text output captured; not checked).

  Raises:
    EnvironmentProblem: git is missing.
  """
  pinned = [a for c in _PINNED_CONFIG for a in ('-c', c)]
  return subprocess.run([git_executable(), *pinned, *args], cwd=cwd,
                        env=git_env(cwd), capture_output=True, text=True,
                        check=False)


def _apply(patch: str, directory: str, reverse: bool, check: bool) -> None:
  args = ['apply', '-p1', '--whitespace=nowarn']
  if reverse:
    args.append('--reverse')
  if check:
    args.append('--check')
  args.append(os.path.abspath(patch))
  proc = run(args, directory)
  if proc.returncode != 0:
    what = 'reverse-apply' if reverse else 'apply'
    msg = (proc.stderr or proc.stdout).strip()
    raise errors.ConflictError(
        f'{os.path.basename(patch)} does not {what} cleanly:\n{msg}')


def check(patch: str, directory: str, reverse: bool = False) -> None:
  """Checks that ``patch`` applies exactly in ``directory``.

  Args:
    patch: path of a ``git format-patch`` file.
    directory: directory the ``a/``/``b/`` paths are relative to.
    reverse: check the reverse patch instead.

  Raises:
    ConflictError: a hunk does not apply (git's message included).
    EnvironmentProblem: git is missing.
  """
  _apply(patch, directory, reverse, check=True)


def apply(patch: str, directory: str, reverse: bool = False) -> None:
  """Checks, then applies ``patch`` in ``directory`` (all hunks or none).

  Args:
    patch: path of a ``git format-patch`` file.
    directory: directory the ``a/``/``b/`` paths are relative to.
    reverse: reverse-apply the patch.

  Raises:
    ConflictError: a hunk does not apply (git's message included).
    EnvironmentProblem: git is missing.
  """
  # git apply is atomic per patch: it writes nothing unless all hunks apply.
  _apply(patch, directory, reverse, check=False)


def try_apply(patch: str, directory: str, reverse: bool = False,
              check_only: bool = True) -> tuple[bool, str]:
  """Runs ``git apply -v`` and reports instead of raising on a conflict.

  Args:
    patch: path of a ``git format-patch`` file.
    directory: directory the ``a/``/``b/`` paths are relative to.
    reverse: use the reverse patch.
    check_only: only check (``--check``); otherwise apply when it applies.

  Returns:
    Whether every hunk applies, and git's verbose output (it names hunks
    applied at an offset, and the file and line of a failing hunk).

  Raises:
    EnvironmentProblem: git is missing.
  """
  args = ['apply', '-v', '-p1', '--whitespace=nowarn']
  if reverse:
    args.append('--reverse')
  if check_only:
    args.append('--check')
  args.append(os.path.abspath(patch))
  proc = run(args, directory)
  return proc.returncode == 0, (proc.stderr + proc.stdout).strip()


def touched_files(patch: str) -> list[str]:
  """Returns the paths a patch touches, in patch order.

  Args:
    patch: path of a ``git format-patch`` file.

  Returns:
    Paths relative to the ``-p1`` root (old and new names of renames).

  Raises:
    PatchDataError: git cannot parse the patch.
    EnvironmentProblem: git is missing.
  """
  proc = run(['apply', '-p1', '--numstat', '-z', os.path.abspath(patch)],
             os.path.dirname(os.path.abspath(patch)))
  if proc.returncode != 0:
    raise errors.PatchDataError(
        f'{os.path.basename(patch)} is not a valid patch:\n'
        f'{proc.stderr.strip()}')
  out: list[str] = []
  fields = proc.stdout.split('\0')
  i = 0
  while i < len(fields):
    entry = fields[i]
    if not entry:
      i += 1
      continue
    path = entry.split('\t', 2)[2]
    if path:
      names = [path]
      i += 1
    else:  # rename/copy: the old and new names follow as separate fields.
      names = [fields[i + 1], fields[i + 2]]
      i += 3
    for name in names:
      if name not in out:
        out.append(name)
  if not out:
    raise errors.PatchDataError(
        f'{os.path.basename(patch)} contains no file changes.')
  return out
