"""Render every command's outcome as a readable table or as JSON."""

from __future__ import annotations

import json
from typing import Any, TYPE_CHECKING

from migration import errors

if TYPE_CHECKING:  # Annotations only: status imports no more than it uses.
  from migration import check
  from migration import compat
  from migration import state
  from migration import transaction


def status_dict(status: state.Status) -> dict[str, Any]:
  """Returns the JSON-able form of a status."""
  env = status.env
  series = status.series
  return {
      'state': str(status.overall),
      'message': status.message,
      'patches_lost': status.lost,
      'patched_wheel': status.wheel,
      'environment': {
          'python': env.python_version,
          'python_executable': env.python,
          'jax': env.jax_version,
          'jax_dist_version': env.dist_version,
          'jaxlib': env.jaxlib_version,
          'site_packages': env.site_packages,
          'warnings': env.warnings(),
      },
      'series': series.name if series else None,
      'applied': status.applied,
      'total': status.total,
      'patches': [
          {'name': p.name, 'subject': p.subject, 'dep3': p.dep3,
           'applied': status.applied is not None and i < status.applied,
           'state': str(status.patches[i]) if status.patches else None}
          for i, p in enumerate(series.patches)] if series else [],
      'files': [
          {'path': f.path, 'state': f.label, 'sha256': f.sha256,
           'record_sha256': f.record_sha256} for f in status.files],
      'leftover': list(status.leftover),
  }


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
  widths = [max(len(r[i]) for r in [headers, *rows])
            for i in range(len(headers))]
  fmt = '  '.join(f'{{:<{w}}}' for w in widths)
  return [fmt.format(*headers).rstrip(),
          fmt.format(*('-' * w for w in widths)),
          *(fmt.format(*r).rstrip() for r in rows)]


def status_text(status: state.Status) -> str:
  """Returns the readable form of a status."""
  env = status.env
  lines = [f'State:         {status.overall}',
           f'               {status.message}']
  if status.lost:
    lines += [f'Patches lost:  {status.lost}']
  lines += [f'Python:        {env.python_version}'
            + (f' ({env.python})' if env.python else ''),
            f'jax:           {env.dist_version or "(not installed)"}',
           f'jaxlib:        {env.jaxlib_version or "(not installed)"}']
  if env.site_packages:
    lines.append(f'site-packages: {env.site_packages}')
  lines.extend(f'Warning:       {w}' for w in env.warnings())
  if status.series:
    lines += ['', f'Series {status.series.name}:']
    lines += _table(
        ['#', 'PATCH', 'STATE', 'FORWARDED'],
        [[str(i + 1), p.name,
          str(status.patches[i]) if status.patches else '-',
          p.dep3.get('Forwarded', '')]
         for i, p in enumerate(status.series.patches)])
  if status.files:
    lines += ['']
    lines += _table(['FILE', 'STATE'],
                    [[f.path, f.label] for f in status.files])
  return '\n'.join(lines)


def result_dict(result: transaction.Result) -> dict[str, Any]:
  return {
      'command': result.command,
      'ok': True,
      'exit_code': int(errors.ExitCode.OK),
      'changed': result.changed,
      'message': result.message,
      'files_changed': list(result.files),
      'recovered': result.recovered,
      'state_dir': result.state_dir,
      'dry_run': result.dry_run,
      'skipped_upstream': list(result.skipped),
      'displaced': list(result.displaced),
      'before': status_dict(result.before),
      'after': status_dict(result.after),
  }


def result_text(result: transaction.Result, table: bool = False) -> str:
  """Returns what apply or revert did: a sentence and the files it wrote.

  Args:
    result: the outcome of ``transaction.run``.
    table: also append the status table of the environment afterwards.

  Returns:
    The text for a terminal.
  """
  lines = [result.message]
  before = {f.path: f.sha256 for f in result.before.files}
  series = result.before.series
  released = (series.hashes[result.before.env.jax_version] if series
              else {})
  for f in result.files:
    # A module the release does not ship: apply creates it, revert removes it.
    verb = ('remove' if result.command == 'revert'
            and released.get(f, ('',))[0] is None else
            'create' if before.get(f, '') is None else 'replace')
    lines.append(f'  would {verb} {f}' if result.dry_run
                 else f'  {verb}d {f}')
  text = '\n'.join(lines)
  return text + '\n\n' + status_text(result.after) if table else text


def error_dict(command: str, error: BaseException,
               code: errors.ExitCode) -> dict[str, Any]:
  return {'command': command, 'ok': False, 'exit_code': int(code),
          'error': code.name.lower(), 'message': str(error)}


def error_text(error: BaseException, code: errors.ExitCode) -> str:
  return f'Error ({code.name.lower()}, exit code {int(code)}): {error}'


def to_json(data: dict[str, Any]) -> str:
  return json.dumps(data, indent=2, sort_keys=True)


def check_dict(results: list[check.VersionCheck],
               table: list[compat.Row] | None = None,
               features: list[compat.Feature] | None = None
               ) -> dict[str, Any]:
  """Returns the JSON-able form of ``check``'s results."""
  ok = all(r.ok for r in results)
  return {
      'command': 'check', 'ok': ok,
      'exit_code': int(errors.ExitCode.OK if ok else errors.ExitCode.MODIFIED),
      'features': [{'number': f.number, 'subject': f.subject,
                    'description': f.description} for f in features or ()],
      'compatibility': [
          {'version': r.version, 'jaxlib': r.jaxlib, 'python': r.python,
           'series': r.series, 'served': r.served,
           'patches': dict(zip((f.subject for f in features or ()),
                               r.cells))}
          for r in table or ()],
      'versions': [
          {'version': r.version, 'series': r.series, 'served': r.served,
           'wheel': r.wheel, 'ok': r.ok,
           'patches': [
               {'name': p.name, 'result': str(p.fit),
                'offsets': [{'file': f, 'hunk': h, 'line': ln, 'offset': o}
                            for f, h, ln, o in p.offsets],
                'conflicts': [
                    {'file': c.path, 'hunk': c.hunk, 'line': c.line,
                     'header': c.header, 'expected': list(c.expected),
                     'found': list(c.found)} for c in p.conflicts],
                'git_message': p.message}
               for p in r.patches]}
          for r in results]}


def compat_text(features: list[compat.Feature],
                table: list[compat.Row]) -> str:
  """Returns the compatibility table for a terminal, with a legend."""
  headers = ['JAX', 'JAXLIB', 'PYTHON', 'SERIES',
             *(f'#{f.number}' for f in features)]
  body = [[r.version, r.jaxlib, r.python,
           r.series if r.served else f'({r.series}, not served)', *r.cells]
          for r in table]
  lines = _table(headers, body)
  lines += ['', *(f'#{f.number}: {f.description}' for f in features)]
  return '\n'.join(lines)


def check_text(results: list[check.VersionCheck], summary: str = '',
               only_conflicts: bool = False) -> str:
  """Returns the readable form of ``check``'s results.

  Args:
    results: ``check.check_versions``'s results.
    summary: ``compat_text``'s table, printed first.
    only_conflicts: show the per-patch detail only of releases where a patch
      conflicts (``--all``); otherwise of every release.
  """
  lines: list[str] = [summary, ''] if summary else []
  for r in results:
    if only_conflicts and r.ok:
      continue
    served = 'served' if r.served else 'not served by this release'
    lines.append(f'jax {r.version} ({served}; series {r.series}, '
                 f'{r.wheel}):')
    rows = []
    for i, p in enumerate(r.patches):
      detail = ''
      if p.offsets:
        offsets = [o for _, _, _, o in p.offsets]
        detail = (f'{len(offsets)} hunk(s), offset {min(offsets):+d}'
                  + (f'..{max(offsets):+d}' if max(offsets) != min(offsets)
                     else '') + ' lines')
      elif p.conflicts:
        detail = ', '.join(f'{c.path.rsplit("/", 1)[-1]} hunk #{c.hunk} at '
                           f'{c.line}' for c in p.conflicts)
      rows.append([str(i + 1), p.name, str(p.fit), detail])
    lines += ['  ' + ln for ln in _table(['#', 'PATCH', 'RESULT', 'WHERE'],
                                         rows)]
    for p in r.patches:
      for c in p.conflicts:
        lines.append(f'  {p.name}: {c.path}, hunk #{c.hunk} (@@ {c.header}) '
                     f'expected at line {c.line}:')
        lines += [f'    | {x}' for x in c.expected]
        lines.append('  the file has there:')
        lines += [f'    | {x}' for x in c.found]
    lines.append('')
  ok = all(r.ok for r in results)
  lines.append('All patches fit.' if ok else
               'Conflicts found (exit code 4); only exact context counts.')
  return '\n'.join(lines)
