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
    match = re.search(r'examples: (\d+) ok, 0 mismatched', output)
    self.assertIsNotNone(match, output)
    num_examples = len([
        p for p in (ROOT / 'examples').glob('*.py')
        if p.name != 'run_all.py' and not p.name.startswith('_')
    ])
    self.assertEqual(int(match.group(1)), num_examples, output)


if __name__ == '__main__':
  absltest.main()
