"""Render every command's outcome as a readable table or as JSON."""

from __future__ import annotations

import json
from typing import Any

from migration import errors
from migration import state
from migration import transaction


def status_dict(status: state.Status) -> dict[str, Any]:
  """Returns the JSON-able form of a status."""
  env = status.env
  series = status.series
  return {
      'state': str(status.overall),
      'message': status.message,
      'environment': {
          'python': env.python_version,
          'jax': env.jax_version,
          'jaxlib': env.jaxlib_version,
          'site_packages': env.site_packages,
          'warnings': env.warnings(),
      },
      'series': series.name if series else None,
      'applied': status.applied,
      'total': status.total,
      'patches': [
          {'name': p.name, 'subject': p.subject, 'dep3': p.dep3,
           'applied': status.applied is not None and i < status.applied}
          for i, p in enumerate(series.patches)] if series else [],
      'files': [
          {'path': f.path, 'state': f.label, 'sha256': f.sha256,
           'record_sha256': f.record_sha256} for f in status.files],
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
           f'               {status.message}',
           f'Python:        {env.python_version}',
           f'jax:           {env.jax_version or "(not installed)"}',
           f'jaxlib:        {env.jaxlib_version or "(not installed)"}']
  if env.site_packages:
    lines.append(f'site-packages: {env.site_packages}')
  lines.extend(f'Warning:       {w}' for w in env.warnings())
  if status.series:
    lines += ['', f'Series {status.series.name}:']
    lines += _table(
        ['#', 'PATCH', 'APPLIED', 'FORWARDED'],
        [[str(i + 1), p.name,
          ('-' if status.applied is None
           else 'yes' if i < status.applied else 'no'),
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
      'before': status_dict(result.before),
      'after': status_dict(result.after),
  }


def result_text(result: transaction.Result) -> str:
  lines = [result.message]
  lines += [f'  replaced {f}' for f in result.files]
  return '\n'.join(lines) + '\n\n' + status_text(result.after)


def error_dict(command: str, error: BaseException,
               code: errors.ExitCode) -> dict[str, Any]:
  return {'command': command, 'ok': False, 'exit_code': int(code),
          'error': code.name.lower(), 'message': str(error)}


def error_text(error: BaseException, code: errors.ExitCode) -> str:
  return f'Error ({code.name.lower()}, exit code {int(code)}): {error}'


def to_json(data: dict[str, Any]) -> str:
  return json.dumps(data, indent=2, sort_keys=True)
