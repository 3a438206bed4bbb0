"""Entry point: ``python -m jax_fork``."""

from __future__ import annotations

from jax_fork import cli

__doc__ = cli.__doc__  # absl prints the main module's docstring as usage.

if __name__ == '__main__':
  cli.run()
