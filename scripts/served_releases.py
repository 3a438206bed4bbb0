"""Prints the jax releases that patches/manifest.json serves, one per line.

Usage: python scripts/served_releases.py [--which=all|newest|others]

newest: the newest served release of each minor line (X.Y), which CI tests
under Bazel (bazel/defs.bzl's JAX_VERSIONS; scripts/bazel_test.sh checks
them with this); others: the rest, which CI patches and tests with the
interpreter tests and the examples; all: both. Newest first.
"""

from __future__ import annotations

import pathlib
import sys

from absl import app
from absl import flags

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from migration import manifest as manifest_lib  # noqa: E402

_WHICH = flags.DEFINE_enum(
    'which', 'all', ['all', 'newest', 'others'],
    'all releases, the newest of each minor line, or the others.')


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  served = manifest_lib.load(str(ROOT / 'patches')).served_versions()
  newest = {}
  for version in served:  # Oldest first, so the newest of a line wins.
    newest[tuple(manifest_lib.version_key(version)[:2])] = version
  chosen = {'all': served, 'newest': list(newest.values()),
            'others': [v for v in served if v not in newest.values()]}
  for version in sorted(chosen[_WHICH.value], key=manifest_lib.version_key,
                        reverse=True):
    print(version)


if __name__ == '__main__':
  app.run(main)
