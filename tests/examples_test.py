"""Runs the example kernels (the README's main job) as a test."""

import importlib.util
import json
import pathlib
import re
import subprocess
import sys

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load_run_all():
  spec = importlib.util.spec_from_file_location(
      'run_all', ROOT / 'examples' / 'run_all.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


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
    run_all = _load_run_all()
    num_skipped = int(match.group(2) or 0)
    self.assertEqual(int(match.group(1)) + num_skipped,
                     len(run_all.examples()), output)
    # Only the examples whose patches this jax's series lacks, or whose API
    # this jax lacks, are skipped: on jax 0.12, none.
    skipped = re.findall(r'^=== (\w+): skipped', output, re.MULTILINE)
    self.assertLen(skipped, num_skipped, output)
    self.assertCountEqual(skipped, run_all.skip_reasons(), output)

  def test_every_example_says_what_it_needs(self):
    run_all = _load_run_all()
    self.assertCountEqual(run_all.NEEDS, run_all.examples())
    subjects = [p['subject'] for series in json.loads(
        run_all.MANIFEST.read_text())['series'].values()
                for p in series['patches']]
    for example, (patches, _) in run_all.NEEDS.items():
      for patch in patches:
        self.assertTrue(any(patch in s for s in subjects), (example, patch))

  def test_examples_are_short(self):
    run_all = _load_run_all()
    for example in run_all.examples():
      lines = (ROOT / 'examples' / f'{example}.py').read_text().splitlines()
      self.assertLess(len(lines), 80, example)


if __name__ == '__main__':
  absltest.main()
