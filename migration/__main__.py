"""Entry point: ``python -m migration``."""

from __future__ import annotations

import sys

from migration import errors
from migration import interrupt

if __name__ == '__main__':
  # Before the slow imports: a signal during them exits with its code too.
  interrupt.install()

with interrupt.exit_on_signal():
  try:
    from migration import cli  # pylint: disable=g-import-not-at-top
  except ModuleNotFoundError as e:
    if not e.name or e.name.partition('.')[0] == 'migration':
      raise
    # A dependency missing from the running Python is the environment's
    # problem (exit code 5), not a bug of the tool (1).
    sys.stderr.write(
        f'python -m migration: {e.name} is not installed in {sys.executable};'
        " install the tool's dependencies (requirements-main.txt, or pip"
        ' install of this repository).\n')
    sys.exit(errors.ExitCode.ENVIRONMENT)

__doc__ = cli.__doc__  # absl prints the main module's docstring as usage.

if __name__ == '__main__':
  cli.run()
