"""A thin wrapper over ``git apply``; never fuzzes.

Patches are applied with ``-p1`` and git's default of exact context: no
``-C``, no ``--3way``, no ``--recount``. A hunk that does not apply is a
conflict, reported with git's own message (which names the file and line).
Any other failure of git (killed by a signal, e.g. SIGXFSZ under
``ulimit -f``; a file it cannot write) is an environment problem, never a
conflict.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
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
# GIT_CONFIG_GLOBAL is not read). core.attributesFile: no user's attributes
# file (by default $XDG_CONFIG_HOME/git/attributes or
# ~/.config/git/attributes), where e.g. `* text eol=crlf` would make
# ``git apply`` write CRLF line endings.
_PINNED_CONFIG = ('core.autocrlf=false', 'core.eol=lf', 'core.safecrlf=false',
                  'apply.whitespace=nowarn', 'apply.ignoreWhitespace=no',
                  f'core.attributesFile={os.devnull}')

# What ``git apply`` says (in the C locale, which ``git_env`` sets) when a
# patch does not fit the files: a conflict. Any other failure is not one.
_CONFLICT_RE = re.compile(
    r'^error: (patch failed: .*|while searching for:'
    r'|.*: (patch does not apply|wrong type|does not match index'
    r'|(does not exist|already exists) in (working directory|index)'
    r'|No such file or directory|Not a directory)'
    r'|.* has type \d+, expected \d+|new file .* depends on old contents'
    r'|deleted file .* still has contents|removal patch leaves file contents'
    r'|binary patch does not apply to .*|cannot apply binary patch to .*'
    r'|the patch applies to .*, which does not match the current contents\.)$',
    re.MULTILINE)


def git_env(cwd: str) -> dict[str, str]:
  """The environment of every git call of the tool (``run``).

  The user's and the system's git configuration are ignored
  (``GIT_CONFIG_GLOBAL=/dev/null``, ``GIT_CONFIG_NOSYSTEM=1``, and no
  ``GIT_CONFIG_PARAMETERS``/``GIT_CONFIG_COUNT`` from the caller): e.g.
  ``core.autocrlf = true`` in ``~/.gitconfig`` would make ``git apply``
  write CRLF line endings. So are the system's git attributes
  (``GIT_ATTR_NOSYSTEM=1``: ``/etc/gitattributes``; the user's are
  ``run``'s pinned ``core.attributesFile``). git never discovers a
  repository above ``cwd``. Its messages are in English (``LC_ALL=C``):
  ``_CONFLICT_RE`` reads them.

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
  env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM='1',
             GIT_ATTR_NOSYSTEM='1', LC_ALL='C')
  return env


def run(args: list[str], cwd: str) -> subprocess.CompletedProcess[str]:
  """Runs ``git ARGS`` in ``cwd`` with ``git_env`` and pinned settings.

  Args:
    args: git's arguments, e.g. ``['apply', '--check', PATCH]``.
    cwd: the directory to run in.

  Returns:
    The finished process (not checked). Its output is captured and decoded
    as UTF-8 whatever the locale (it may hold paths); bytes that are not
    UTF-8 become U+FFFD.

  Raises:
    EnvironmentProblem: git is missing.
  """
  pinned = [a for c in _PINNED_CONFIG for a in ('-c', c)]
  return subprocess.run([git_executable(), *pinned, *args], cwd=cwd,
                        env=git_env(cwd), capture_output=True,
                        encoding='utf-8', errors='replace', check=False)


def _killed(proc: subprocess.CompletedProcess[str],
            what: str) -> errors.EnvironmentProblem | None:
  """The error for a git that a signal killed, else None."""
  if proc.returncode >= 0:
    return None
  number = -proc.returncode
  try:
    name = f'{signal.Signals(number).name} ({signal.strsignal(number)})'
  except ValueError:
    name = f'signal {number}'
  return errors.EnvironmentProblem(
      f'git was killed by {name} during the {what}: a limit of this '
      'process (ulimit -f on the size of a file it writes, ulimit -v, -t) or '
      'another process stopped it. The patch itself is not to blame.')


def _check_fit_or_conflict(proc: subprocess.CompletedProcess[str],
                           patch: str, directory: str) -> None:
  """Raises unless ``git apply`` of ``patch`` succeeded or conflicts.

  Raises:
    EnvironmentProblem: git was killed by a signal, or failed for another
      reason than a patch that does not fit (e.g. a file it cannot write).
  """
  what = f'git apply of {os.path.basename(patch)}'
  killed = _killed(proc, what)
  if killed is not None:
    raise killed
  if proc.returncode not in (0, 1) or (
      proc.returncode == 1 and not _CONFLICT_RE.search(proc.stderr)):
    msg = (proc.stderr or proc.stdout).strip()
    raise errors.EnvironmentProblem(
        f'The {what} in {directory} failed (exit code {proc.returncode}), '
        f'not because the patch does not fit the files:\n{msg}')


def _apply(patch: str, directory: str, reverse: bool, check: bool) -> None:
  args = ['apply', '-p1', '--whitespace=nowarn']
  if reverse:
    args.append('--reverse')
  if check:
    args.append('--check')
  args.append(os.path.abspath(patch))
  proc = run(args, directory)
  _check_fit_or_conflict(proc, patch, directory)
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
    EnvironmentProblem: git is missing, was killed by a signal, or failed
      otherwise than by a conflict.
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
    EnvironmentProblem: git is missing, was killed by a signal (e.g.
      SIGXFSZ: a file over ``ulimit -f``), or failed otherwise than by a
      conflict (e.g. a file it cannot write).
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
    EnvironmentProblem: git is missing, was killed by a signal (e.g.
      SIGXFSZ: a file over ``ulimit -f``), or failed otherwise than by a
      conflict (e.g. a file it cannot write).
  """
  args = ['apply', '-v', '-p1', '--whitespace=nowarn']
  if reverse:
    args.append('--reverse')
  if check_only:
    args.append('--check')
  args.append(os.path.abspath(patch))
  proc = run(args, directory)
  _check_fit_or_conflict(proc, patch, directory)
  return proc.returncode == 0, (proc.stderr + proc.stdout).strip()


def touched_files(patch: str) -> list[str]:
  """Returns the paths a patch touches, in patch order.

  Args:
    patch: path of a ``git format-patch`` file.

  Returns:
    Paths relative to the ``-p1`` root (old and new names of renames).

  Raises:
    PatchDataError: git cannot parse the patch.
    EnvironmentProblem: git is missing or was killed by a signal.
  """
  proc = run(['apply', '-p1', '--numstat', '-z', os.path.abspath(patch)],
             os.path.dirname(os.path.abspath(patch)))
  killed = _killed(proc, f'git apply --numstat of {os.path.basename(patch)}')
  if killed is not None:
    raise killed
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
