"""Drift between series: where a series' copy of a change differs in content.

Every series carries the same changes (patches with the same subject); they
differ in context and line numbers, and legitimately where an older release
needs more (its own machinery, another file layout). This module compares
each series' patch with the newest series' patch of the same subject by
what the hunks add and remove, ignoring context lines, line numbers, hunk
boundaries and file names: the multiset of ``+`` lines and of ``-`` lines
(trailing whitespace ignored). Lines only in the series and lines only in
the newest series are its drift.

The known drift is recorded in ``patches/drift.json`` (per series and
patch: the line counts and a sha256 of the differing lines). ``python -m
jax_fork drift`` prints the table and fails (exit code 7) on drift not in
that baseline, e.g. a fix made on the newest branch and not carried to the
others; ``drift --update`` records the current drift after a maintainer has
reviewed it. A fix carried to every series with the same added and removed
lines leaves the drift unchanged.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import re

from migration import errors
from migration import manifest as manifest_lib

BASELINE = 'drift.json'
_HUNK_RE = re.compile(r'^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@')

SAME = 'same'
ABSENT = 'absent'


def change_lines(text: str) -> collections.Counter:
  """Returns the added and removed lines of a patch: ``(sign, line)`` counts.

  Args:
    text: a ``git format-patch`` file's text.
  """
  out: collections.Counter = collections.Counter()
  old = new = 0
  for line in text.split('\n'):
    if old > 0 or new > 0:
      marker, rest = line[:1], line[1:].rstrip()
      if marker == '\\':
        continue
      if marker in (' ', ''):
        old, new = old - 1, new - 1
      elif marker == '-':
        old -= 1
        out[('-', rest)] += 1
      elif marker == '+':
        new -= 1
        out[('+', rest)] += 1
      continue
    m = _HUNK_RE.match(line)
    if m:
      old = 1 if m.group(1) is None else int(m.group(1))
      new = 1 if m.group(2) is None else int(m.group(2))
  return out


@dataclasses.dataclass(frozen=True)
class Drift:
  """One series' patch compared with the newest series' patch.

  Attributes:
    series: the series.
    subject: the patch's subject.
    only_here: ``(sign, line)`` pairs only in this series' patch.
    only_newest: those only in the newest series' patch.
    absent: the newest series has no patch with this subject (or this
      series lacks the newest's patch).
  """
  series: str
  subject: str
  only_here: tuple[tuple[str, str], ...]
  only_newest: tuple[tuple[str, str], ...]
  absent: bool = False

  @property
  def same(self) -> bool:
    return not (self.only_here or self.only_newest or self.absent)

  @property
  def fingerprint(self) -> str:
    data = json.dumps([self.absent, self.only_here, self.only_newest])
    return hashlib.sha256(data.encode()).hexdigest()

  def record(self) -> dict:
    return {'only_here': len(self.only_here),
            'only_newest': len(self.only_newest), 'absent': self.absent,
            'sha256': self.fingerprint}


def _read(path: str) -> str:
  with open(path, encoding='utf-8', errors='replace') as f:
    return f.read()


def _expand(c: collections.Counter) -> tuple[tuple[str, str], ...]:
  return tuple(sorted(c.elements()))


def newest_series(manifest: manifest_lib.Manifest) -> manifest_lib.Series:
  s = manifest.series_for(manifest.served_versions()[-1])
  assert s is not None
  return s


def compare(manifest: manifest_lib.Manifest) -> list[Drift]:
  """Compares every series with the newest, patch by patch (by subject).

  Returns:
    One entry per (series, subject) of every series but the newest, the
    series ordered newest first and the subjects in the newest's order.
  """
  newest = newest_series(manifest)
  ref = {p.subject: change_lines(_read(p.path)) for p in newest.patches}
  order = [p.subject for p in newest.patches]
  out = []
  for s in sorted(manifest.series.values(), reverse=True,
                  key=lambda s: manifest_lib.version_key(s.name[4:])):
    if s is newest:
      continue
    mine = {p.subject: change_lines(_read(p.path)) for p in s.patches}
    subjects = order + [x for x in mine if x not in ref]
    for subject in subjects:
      if subject not in mine or subject not in ref:
        out.append(Drift(s.name, subject, (), (), absent=True))
        continue
      out.append(Drift(s.name, subject, _expand(mine[subject] - ref[subject]),
                       _expand(ref[subject] - mine[subject])))
  return out


def baseline_path(manifest: manifest_lib.Manifest) -> str:
  return os.path.join(manifest.patches_dir, BASELINE)


def load_baseline(manifest: manifest_lib.Manifest) -> dict:
  """Returns the recorded drift: series -> subject -> record.

  Raises:
    PatchDataError: the baseline is not valid JSON.
  """
  path = baseline_path(manifest)
  if not os.path.isfile(path):
    return {}
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f).get('series', {})
  except ValueError as e:
    raise errors.PatchDataError(f'Cannot read {path}: {e}') from e


def write_baseline(manifest: manifest_lib.Manifest,
                   drifts: list[Drift]) -> str:
  """Records ``drifts`` (those that are not ``same``) as the known drift."""
  data: dict = {'newest': newest_series(manifest).name, 'series': {}}
  for d in drifts:
    if not d.same:
      data['series'].setdefault(d.series, {})[d.subject] = d.record()
  path = baseline_path(manifest)
  with open(path + '.tmp', 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=2, sort_keys=True)
    f.write('\n')
  os.replace(path + '.tmp', path)
  return path


def status(d: Drift, baseline: dict) -> str:
  """'same', 'known' (as recorded) or 'new' (not recorded, or changed)."""
  known = baseline.get(d.series, {}).get(d.subject)
  if d.same:
    return SAME if known is None else 'new'  # Recorded drift that went away.
  return 'known' if known and known.get('sha256') == d.fingerprint else 'new'


def table_text(manifest: manifest_lib.Manifest, drifts: list[Drift],
               baseline: dict) -> str:
  """The report: one row per series, one column per patch of the newest.

  A cell is ``same``, or ``+A/-B`` (A lines only in that series' patch, B
  only in the newest's), marked ``new`` when the baseline does not record
  that drift.
  """
  newest = newest_series(manifest)
  number = {p.subject: f'#{i}' for i, p in enumerate(newest.patches, 1)}
  cols = list(number.values())
  rows: dict[str, dict[str, str]] = {}
  extra = []
  for d in drifts:
    st = status(d, baseline)
    if d.same:
      cell = SAME if st == SAME else 'same (new)'
    elif d.absent:
      cell = ABSENT + (' (new)' if st == 'new' else '')
    else:
      cell = (f'+{len(d.only_here)}/-{len(d.only_newest)}'
              + (' (new)' if st == 'new' else ''))
    col = number.get(d.subject)
    if col is None:
      col = f'extra: {d.subject}'
      extra.append(col)
    rows.setdefault(d.series, {})[col] = cell
  cols += sorted(set(extra))
  head = ['SERIES', *cols]
  body = [[s, *(r.get(c, '') for c in cols)] for s, r in rows.items()]
  widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
  lines = [f'Drift from the newest series {newest.name}: +A/-B = A lines '
           'added or removed only by', 'that series\' patch, B only by the '
           'newest\'s (context, line numbers, files ignored).', '']
  for r in [head, ['-' * w for w in widths], *body]:
    lines.append('  '.join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
  lines += ['', *(f'{n}: {s}' for s, n in number.items())]
  return '\n'.join(lines)


def details_text(drifts: list[Drift], series: str, limit: int = 200) -> str:
  """The differing lines of one series, patch by patch."""
  out = []
  for d in drifts:
    if d.series != series or d.same:
      continue
    out.append(f'{series}: {d.subject}')
    if d.absent:
      out.append('  (no patch with this subject in one of the two series)')
    for title, pairs in (('only here', d.only_here),
                         ('only in the newest', d.only_newest)):
      out.append(f'  {title} ({len(pairs)} lines):')
      out += [f'    {sign}{line}' for sign, line in pairs[:limit]]
      if len(pairs) > limit:
        out.append(f'    ... ({len(pairs) - limit} more)')
  return '\n'.join(out) or f'{series}: no drift.'
