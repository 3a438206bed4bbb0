"""Parse the hunks of a ``git format-patch`` file (to explain conflicts)."""

from __future__ import annotations

import dataclasses
import re

_HUNK_RE = re.compile(r'^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$')


@dataclasses.dataclass(frozen=True)
class Hunk:
  """One hunk of a patch.

  Attributes:
    path: the file, relative to the ``-p1`` root.
    index: 1-based number of the hunk within its file (as git counts).
    old_start: first line of the hunk in the original file.
    old_count: number of lines the hunk expects.
    header: the text after the second ``@@`` (the enclosing definition).
    expected: the lines the hunk expects in the file (context and removed
      lines, in order), without their leading marker.
    result: the lines the hunk leaves (context and added lines).
  """
  path: str
  index: int
  old_start: int
  old_count: int
  header: str
  expected: tuple[str, ...]
  result: tuple[str, ...]


def parse(text: str) -> list[Hunk]:
  """Returns every hunk of a patch, in order.

  Args:
    text: the patch text.

  Returns:
    The hunks; empty for a patch without a diff.
  """
  out: list[Hunk] = []
  path = None
  index = 0
  lines = text.split('\n')
  i = 0
  while i < len(lines):
    line = lines[i]
    if line.startswith('diff --git '):
      path, index = None, 0
    elif line.startswith('+++ ') and path is None:
      name = line[4:].rstrip('\t')
      path = name[2:] if name.startswith('b/') else name
    m = _HUNK_RE.match(line)
    if m and path is not None:
      index += 1
      old_count = 1 if m.group(2) is None else int(m.group(2))
      new_count = 1 if m.group(4) is None else int(m.group(4))
      expected: list[str] = []
      result: list[str] = []
      i += 1
      while i < len(lines) and (len(expected) < old_count or
                                len(result) < new_count):
        body = lines[i]
        if body.startswith('\\'):
          i += 1
          continue
        marker, rest = body[:1], body[1:]
        if marker in (' ', ''):
          expected.append(rest)
          result.append(rest)
        elif marker == '-':
          expected.append(rest)
        elif marker == '+':
          result.append(rest)
        else:
          break
        i += 1
      out.append(Hunk(path, index, int(m.group(1)), old_count,
                      m.group(5).strip(), tuple(expected), tuple(result)))
      continue
    i += 1
  return out


def find(hunk_list: list[Hunk], path: str, line: int) -> Hunk | None:
  """Returns the hunk of ``path`` that git reports as failing at ``line``.

  git names a failing hunk by the first line of its preimage; the closest
  hunk of that file is returned when no hunk starts exactly there.
  """
  candidates = [h for h in hunk_list if h.path == path]
  if not candidates:
    return None
  return min(candidates, key=lambda h: (abs(h.old_start - line), h.index))
