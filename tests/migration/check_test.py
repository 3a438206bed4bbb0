"""Tests of `check`: exact, offsets, already upstream, conflict (no fuzz)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import check  # noqa: E402
from migration import hunks  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from migration import wheels  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')
VERSION = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', '0.12.0.1')


class CheckTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    cls.series = cls.manifest.series_for(VERSION)
    cls.wheel = wheels.pristine_wheel(VERSION)

  def setUp(self):
    super().setUp()
    self.tmp = tempfile.mkdtemp(prefix='check-test-')
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    wheels.extract(self.wheel, self.series.files, self.tmp)

  def path(self, relpath: str) -> str:
    return os.path.join(self.tmp, *relpath.split('/'))

  def test_parse_hunks(self):
    first = self.series.patches[0]
    with open(first.path, encoding='utf-8') as f:
      text = f.read()
    parsed = hunks.parse(text)
    self.assertEqual(len(parsed), text.count('\n@@ '))
    h = parsed[0]
    self.assertEqual(h.path, first.files[0])
    self.assertEqual(h.index, 1)
    self.assertLen(h.expected, h.old_count)
    with open(self.path(h.path), encoding='utf-8') as f:
      lines = f.read().split('\n')
    start = h.old_start - 1
    self.assertEqual(tuple(lines[start:start + h.old_count]), h.expected)
    self.assertIs(hunks.find(parsed, h.path, h.old_start), h)

  def test_exact(self):
    fits = check.check_tree(self.series.to_apply(VERSION), self.tmp)
    self.assertEqual({f.fit for f in fits}, {check.Fit.EXACT})

  def test_offsets(self):
    target = self.series.patches[0].files[-1]
    with open(self.path(target), 'rb') as f:
      data = f.read()
    with open(self.path(target), 'wb') as f:
      f.write(b'# one\n# two\n' + data)
    fits = check.check_tree(self.series.patches, self.tmp)
    self.assertEqual(fits[0].fit, check.Fit.OFFSETS)
    self.assertTrue(all(o == 2 for _, _, _, o in fits[0].offsets))
    self.assertTrue(all(p == target for p, _, _, _ in fits[0].offsets))

  def test_already_upstream(self):
    first = self.series.patches[0]
    subprocess.run(['git', 'apply', '-p1', first.path], cwd=self.tmp,
                   check=True)
    fits = check.check_tree(self.series.patches, self.tmp)
    self.assertEqual(fits[0].fit, check.Fit.UPSTREAM)
    self.assertEqual({f.fit for f in fits[1:]}, {check.Fit.EXACT})

  def test_conflict_names_hunk_and_expected_lines(self):
    first = self.series.patches[0]
    with open(first.path, encoding='utf-8') as f:
      parsed = hunks.parse(f.read())
    h = parsed[-1]  # The last hunk of the patch's last file.
    with open(self.path(h.path), encoding='utf-8') as f:
      text = f.read()
    victim = max((x for x in h.expected if text.count(x) == 1), key=len)
    with open(self.path(h.path), 'w', encoding='utf-8') as f:
      f.write(text.replace(victim, victim + '  # changed', 1))
    before = open(self.path(h.path), 'rb').read()
    fits = check.check_tree([first], self.tmp)
    self.assertEqual(fits[0].fit, check.Fit.CONFLICT)
    (conflict,) = fits[0].conflicts
    self.assertEqual((conflict.path, conflict.hunk, conflict.line),
                     (h.path, h.index, h.old_start))
    self.assertEqual(conflict.expected, h.expected)
    self.assertIn(victim + '  # changed', conflict.found)
    self.assertIn('patch does not apply', fits[0].message)
    # Nothing was written: no fuzz, no partial apply.
    self.assertEqual(open(self.path(h.path), 'rb').read(), before)

  def _run(self, *args, expect=0):
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, '-m', 'migration', *args],
                          env=env, cwd=self.tmp, capture_output=True,
                          text=True, check=False)
    self.assertEqual(proc.returncode, expect, proc.stderr)
    return proc

  def test_cli_all_and_versions(self):
    data = json.loads(self._run('check', '--all', '--json').stdout)
    self.assertTrue(data['ok'])
    self.assertEqual([v['version'] for v in data['versions']],
                     self.manifest.served_versions())
    out = self._run('check', f'--version={VERSION}').stdout
    self.assertIn('All patches fit.', out)

  def test_cli_bad_versions(self):
    proc = self._run('check', '--version=not-a-version', expect=2)
    self.assertIn('not a jax version', proc.stderr)
    proc = self._run('check', '--all', f'--version={VERSION}', expect=2)
    self.assertIn('not both', proc.stderr)


if __name__ == '__main__':
  absltest.main()
