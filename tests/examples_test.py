"""Runs the example kernels (the README's main job) as a test."""

import pathlib
import re
import subprocess
import sys

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parent.parent


class ExamplesTest(absltest.TestCase):

  def test_every_example_matches_its_independent_value(self):
    proc = subprocess.run(
        [sys.executable, str(ROOT / 'examples' / 'run_all.py')],
        capture_output=True, text=True, timeout=1200, check=False,
    )
    output = proc.stdout + proc.stderr
    self.assertEqual(proc.returncode, 0, output)
    self.assertNotIn('MISMATCH', output)
    match = re.search(
        r'examples: (\d+) ok, 0 mismatched, 0 failed(?:, (\d+) skipped)?',
        output,
    )
    self.assertIsNotNone(match, output)
    num_examples = len([
        p for p in (ROOT / 'examples').glob('*.py')
        if p.name != 'run_all.py' and not p.name.startswith('_')
    ])
    num_skipped = int(match.group(2) or 0)
    self.assertEqual(int(match.group(1)) + num_skipped, num_examples, output)
    # Only the SparseCore example may be skipped, and only on releases whose
    # interpreter cannot run SparseCore meshes (jax 0.9.2 and older).
    sys.path.insert(0, str(ROOT / 'examples'))
    try:
      import _report  # pylint: disable=g-import-not-at-top
    finally:
      sys.path.pop(0)
    expected_skipped = 0 if _report.sparsecore_unsupported() is None else 1
    self.assertEqual(num_skipped, expected_skipped, output)


if __name__ == '__main__':
  absltest.main()
