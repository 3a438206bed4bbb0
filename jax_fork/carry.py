"""Carry a fix across the branches of ``fork --all`` (one fix, every series).

A maintainer fixes a patch on one branch (normally the newest series'),
commits the fix with ``git commit --fixup=<the patch's commit>``, then
carries it: for every other series' branch, newest first, ``git
cherry-pick -x`` (a 3-way merge, so the fix lands although the context and
line numbers differ) and ``git rebase --autosquash`` (non-interactive: the
sequence editor is ``true``) fold the fix into the commit with the same
subject, so the branch keeps one commit per patch. The source branch is
squashed last. ``amend!`` and ``squash!`` commits, whose messages end up in
the patch, and commits that are none of these (carried as a new commit, a
new patch at the end of every series) are cherry-picked without ``-x``, so
that the message, and so the patch header, is the same on every branch.

It stops at the first conflict: that branch is reset to where it was, the
branches already carried keep the fix, and the error names the branch, the
file, the line and the hunk of the fix that did not merge, and the command
that carries the fix to the remaining branches once the conflict is fixed
by hand (``git cherry-pick -x`` on that branch, resolve, ``git rebase -i
--autosquash``).
"""

from __future__ import annotations

import dataclasses
import os
import re

from migration import errors
from jax_fork import fork
from migration import hunks as hunks_lib
from migration import manifest as manifest_lib

_SQUASH_PREFIXES = ('fixup! ', 'amend! ', 'squash! ')


@dataclasses.dataclass(frozen=True)
class CarryResult:
  """What ``carry`` did.

  Attributes:
    commits: the carried commits (full ids), oldest first.
    subjects: their subjects.
    source: the branch the fix was made on (squashed last).
    branches: the branches the fix was carried to, in order.
  """
  commits: tuple[str, ...]
  subjects: tuple[str, ...]
  source: str
  branches: tuple[str, ...]


def _commits(fork_dir: str, revs: list[str]) -> list[str]:
  out: list[str] = []
  for rev in revs:
    try:
      if '..' in rev:
        ids = fork._git(fork_dir, 'rev-list', '--reverse', '--no-merges',
                        rev).split()
      else:
        ids = [fork._git(fork_dir, 'rev-parse', '--verify', '-q',
                         rev + '^{commit}').strip()]
    except errors.ConflictError as e:
      raise errors.UsageError(
          f'{rev} is not a commit or range of the fork. Nothing was '
          f'changed.') from e
    out.extend(i for i in ids if i not in out)
  if not out:
    raise errors.UsageError(
        f'{" ".join(revs)} names no commit. Nothing was changed.')
  return out


def _subject(fork_dir: str, rev: str) -> str:
  return fork._git(fork_dir, 'log', '-1', '--format=%s', rev).strip()


def _subjects(fork_dir: str, base: str, branch: str) -> list[str]:
  return fork._git(fork_dir, 'log', '--reverse', '--format=%s',
                   f'{base}..{branch}').splitlines()


def _regions(text: str) -> list[tuple[int, list[str], list[str]]]:
  """Conflict regions of a merged file: (line, ours, theirs)."""
  out = []
  lines = text.split('\n')
  i = 0
  while i < len(lines):
    if lines[i].startswith('<<<<<<< '):
      start, ours, theirs, side = i + 1, [], [], 'ours'
      i += 1
      while i < len(lines) and not lines[i].startswith('>>>>>>> '):
        if lines[i].startswith('||||||| '):
          side = 'base'
        elif lines[i] == '=======':
          side = 'theirs'
        elif side == 'ours':
          ours.append(lines[i])
        elif side == 'theirs':
          theirs.append(lines[i])
        i += 1
      out.append((start, ours, theirs))
    i += 1
  return out


def _excerpt(lines: list[str], limit: int = 8) -> str:
  out = ''.join(f'    {t}\n' for t in lines[:limit])
  if len(lines) > limit:
    out += f'    ... ({len(lines) - limit} more lines)\n'
  return out


def _enclosing(lines: list[str], line: int) -> str:
  for text in reversed(lines[:line]):
    if re.match(r'\s*(async\s+)?(def|class)\s', text):
      return text.strip()
  return ''


def describe_conflict(fork_dir: str, branch: str, commit: str,
                      label: str = 'the fix') -> str:
  """Names the files, lines and hunks of ``commit`` that did not merge.

  Args:
    fork_dir: the fork, stopped in a cherry-pick or rebase with conflicts.
    branch: the branch being carried to.
    commit: the commit being applied.
    label: what the commit is, for the message.

  Returns:
    A readable description, one paragraph per conflicting region.
  """
  files = fork._git(fork_dir, 'diff', '--name-only',
                    '--diff-filter=U').split()
  fix = hunks_lib.parse(fork._git(fork_dir, 'show', '--format=', commit))
  out = []
  for path in files:
    with open(os.path.join(fork_dir, *path.split('/')), encoding='utf-8',
              errors='replace') as f:
      text = f.read()
    lines = text.split('\n')
    regions = _regions(text)
    if not regions:
      hunk = next((h for h in fix if h.path == path), None)
      out.append(
          f'{branch}: {path}: {branch} does not have this file, which '
          f'{commit[:12]} ({_subject(fork_dir, commit)}) changes'
          + (f' in hunk #{hunk.index} ({hunk.header or "no header"})'
             if hunk is not None else '')
          + f'; make the change where {branch} keeps that code.\n')
    for line, ours, theirs in regions:
      hunk = next((h for h in fix if h.path == path and
                   (set(h.result) - set(h.expected)) & set(theirs)), None)
      if hunk is None:
        hunk = next((h for h in fix if h.path == path), None)
      name = (f'hunk #{hunk.index} ({hunk.header or "no header"})'
              if hunk is not None else 'a hunk')
      where = _enclosing(lines, line)
      out.append(
          f'{branch}: {path}:{line}: {name} of {commit[:12]} '
          f'({_subject(fork_dir, commit)}) conflicts'
          + (f' in `{where}`' if where else '') + '.\n'
          + f'  {branch} has:\n' + _excerpt(ours)
          + f'  {label} has:\n' + _excerpt(theirs))
  return '\n'.join(out) or f'{branch}: git reported a conflict.'


def _restore(fork_dir: str, branch: str, tip: str, source: str) -> None:
  git_dir = os.path.join(fork_dir, fork.PACKAGE_DIR, '.git')
  if os.path.isdir(os.path.join(git_dir, 'rebase-merge')) or os.path.isdir(
      os.path.join(git_dir, 'rebase-apply')):
    fork._git(fork_dir, 'rebase', '--abort')
  if os.path.exists(os.path.join(git_dir, 'CHERRY_PICK_HEAD')):
    fork._git(fork_dir, 'cherry-pick', '--abort')
  fork._git(fork_dir, 'checkout', '-q', '-f', branch)
  fork._git(fork_dir, 'reset', '-q', '--hard', tip)
  fork._git(fork_dir, 'checkout', '-q', source)


def _apply(fork_dir: str, branch: str, base: str, commits: list[str],
           subjects: list[str]) -> None:
  """Cherry-picks ``commits`` onto the checked-out ``branch``, squashes."""
  git_dir = os.path.join(fork_dir, fork.PACKAGE_DIR, '.git')
  before = _subjects(fork_dir, base, branch)
  squash = False
  for commit, subject in zip(commits, subjects):
    if subject.startswith(_SQUASH_PREFIXES):
      squash = True
      target = subject.split(' ', 1)[1]
      while target.startswith(_SQUASH_PREFIXES):
        target = target.split(' ', 1)[1]
      if target not in before:
        raise errors.ConflictError(
            f'{branch} has no commit "{target}" to fold {commit[:12]} '
            f'into.')
    args = ['cherry-pick', '--allow-empty', '--keep-redundant-commits']
    if subject.startswith('fixup! '):
      args.append('-x')  # The squash drops the fixup's message, and this.
    try:
      fork._git(fork_dir, *args, commit)
    except errors.ConflictError as e:
      if not os.path.exists(os.path.join(git_dir, 'CHERRY_PICK_HEAD')):
        raise
      raise _Stopped(describe_conflict(fork_dir, branch, commit)) from e
  if squash:
    try:
      fork._git(fork_dir, 'rebase', '-q', '-i', '--autosquash', base,
                env={'GIT_SEQUENCE_EDITOR': 'true', 'GIT_EDITOR': 'true'})
    except errors.ConflictError as e:
      head = os.path.join(git_dir, 'REBASE_HEAD')
      if not os.path.exists(head):
        raise
      with open(head, encoding='utf-8') as f:
        commit = f.read().strip()
      raise _Stopped(
          'while squashing (git rebase --autosquash): '
          + describe_conflict(fork_dir, branch, commit)) from e


class _Stopped(Exception):
  """A conflict on one branch (the message describes it)."""


def carry(manifest: manifest_lib.Manifest, fork_dir: str, revs: list[str],
          onto: list[str] | None = None) -> CarryResult:
  """Carries commits of the checked-out branch to the other branches.

  Args:
    manifest: the loaded manifest (its series name the branches).
    fork_dir: the fork made by ``fork --all``.
    revs: commits (``abc123``) or ranges (``A..B``) to carry, in order.
    onto: the branches to carry them to; default every other series'
      branch. Carried newest series first.

  Returns:
    What was carried.

  Raises:
    UsageError: no fork with a branch per series, an unknown branch or
      commit, or the checked-out branch is not a series' branch.
    ModifiedError: the fork has uncommitted or unfinished work.
    ConflictError: a commit does not merge into a branch (that branch is
      reset; the branches before it keep the fix); the message names the
      branch, file, line and hunk, and how to carry to the rest.
    EnvironmentProblem: git is missing.
  """
  pairs = fork.series_branches(manifest, fork_dir)
  fork._require_clean(fork_dir)
  bases = {s.name: f'upstream/{v}' for s, v in pairs}
  source = fork._git(fork_dir, 'symbolic-ref', '-q', '--short',
                     'HEAD').strip()
  if source not in bases:
    raise errors.UsageError(
        f'The checked-out branch {source!r} is not a series branch; check '
        f'out the branch you fixed (e.g. {pairs[-1][0].name}).')
  commits = _commits(fork_dir, revs)
  subjects = [_subject(fork_dir, c) for c in commits]
  newest_first = [s.name for s, _ in reversed(pairs)]
  if onto:
    unknown = [b for b in onto if b not in bases]
    if unknown:
      raise errors.UsageError(
          f'No series branch {", ".join(unknown)} (branches: '
          f'{", ".join(newest_first)}). Nothing was changed.')
    targets = [b for b in newest_first if b in onto and b != source]
  else:
    targets = [b for b in newest_first if b != source]
  on_source = all(
      _is_ancestor(fork_dir, c, source) for c in commits)
  if not on_source and not onto and source not in targets:
    # A fix made elsewhere (and not named with --onto) goes to the checked-out
    # branch too. With --onto, only the branches named: the checked-out one
    # may hold the fix already, folded in by `rebase --autosquash`.
    targets.insert(0, source)
  done: list[str] = []
  for branch in [*targets, *([source] if on_source else [])]:
    tip = fork._git(fork_dir, 'rev-parse', branch).strip()
    if branch != source or not on_source:
      if all(_is_ancestor(fork_dir, c, branch) for c in commits):
        continue
    fork._git(fork_dir, 'checkout', '-q', branch)
    try:
      if branch == source and on_source:
        if any(s.startswith(_SQUASH_PREFIXES) for s in subjects):
          fork._git(fork_dir, 'rebase', '-q', '-i', '--autosquash',
                    bases[branch],
                    env={'GIT_SEQUENCE_EDITOR': 'true',
                         'GIT_EDITOR': 'true'})
      else:
        _apply(fork_dir, branch, bases[branch], commits, subjects)
    except (_Stopped, errors.ConflictError) as e:
      _restore(fork_dir, branch, tip, source)
      rest = [b for b in targets if b not in done and b != branch]
      ids = ' '.join(c[:12] for c in commits)
      subject = subjects[0].split('! ', 1)[-1]
      target = _commit_with_subject(fork_dir, bases[branch], branch, subject)
      if rest:
        then = (f'then carry to the rest:\n  python -m jax_fork carry {ids} '
                f'--onto={",".join(rest)}')
      elif on_source:
        then = (f'then fold the fix on {source}:\n  git checkout {source} && '
                f'GIT_SEQUENCE_EDITOR=true git rebase -i --autosquash '
                f'{bases[source]}')
      else:
        then = 'then every branch has the fix.'
      raise errors.ConflictError(
          f'{e}\n{branch} is unchanged (reset to {tip[:12]}); carried to: '
          f'{", ".join(done) or "none"}. Make the change on {branch} by hand '
          f'in {os.path.join(fork_dir, fork.PACKAGE_DIR)}:\n'
          f'  git checkout {branch}; edit; git commit -a '
          f'--fixup={target[:12] or "<the commit of the patch>"}\n'
          f'  (or git cherry-pick -x {ids}, resolve, git cherry-pick '
          f'--continue), then\n'
          f'  GIT_SEQUENCE_EDITOR=true git rebase -i --autosquash '
          f'{bases[branch]}\n{then}') from None
    done.append(branch)
  fork._git(fork_dir, 'checkout', '-q', source)
  return CarryResult(tuple(commits), tuple(subjects), source, tuple(done))


def _commit_with_subject(fork_dir: str, base: str, branch: str,
                         subject: str) -> str:
  """The id of the commit of ``base..branch`` with ``subject``, or ''."""
  for line in fork._git(fork_dir, 'log', '--format=%H %s',
                        f'{base}..{branch}').splitlines():
    commit, _, s = line.partition(' ')
    if s == subject:
      return commit
  return ''


def _is_ancestor(fork_dir: str, commit: str, branch: str) -> bool:
  try:
    fork._git(fork_dir, 'merge-base', '--is-ancestor', commit, branch)
  except errors.ConflictError:
    return False
  return True
