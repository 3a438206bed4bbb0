"""Entry point: ``python -m migration``."""

from __future__ import annotations

from migration import interrupt

if __name__ == '__main__':
  # Before the slow imports: a signal during them exits with its code too.
  interrupt.install()

with interrupt.exit_on_signal():
  from migration import cli  # pylint: disable=g-import-not-at-top

__doc__ = cli.__doc__  # absl prints the main module's docstring as usage.

if __name__ == '__main__':
  cli.run()
