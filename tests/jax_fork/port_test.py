"""Tests of `port`: serving a new jax release from the nearest series.

The new releases are synthetic: the newest served release's wheel with its
interpreter files shifted by a few lines (and, for the conflict, one line a
hunk changes edited), and its version set to an unserved number. Only the
interpreter package and the metadata go into the wheel, to keep it small.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import manifest as manifest_lib  # noqa: E402
from migration import wheels  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')
NEWEST = manifest_lib.load(PATCHES).served_versions()[-1]
ONCE = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', NEWEST) == NEWEST
PACKAGE = 'jax/_src/pallas/mosaic/interpret/'
# Files the series patches outside the package (none at present), which a
# synthetic release has as released.
OUTSIDE = tuple(f for f in manifest_lib.load(PATCHES).series_for(NEWEST).files
                if not f.startswith(PACKAGE))
SHIFT = '# A line this synthetic release adds.\n' * 3
# A line that the local-signal patch of the newest series removes.
REMOVED = '    target_local_core_id = 0\n'


def synthetic_wheel(source: str, version: str, out_dir: str,
                    shift: str = '', edit: tuple[str, str] | None = None
                    ) -> str:
  """Writes jax-VERSION-py3-none-any.whl made from ``source``'s interpreter.

  Args:
    source: a released jax wheel.
    version: the version number the new wheel declares.
    out_dir: where to write it.
    shift: text put before every interpreter module (shifts every hunk).
    edit: (old, new) replaced once in the module holding ``old``.

  Returns:
    The wheel's path.
  """
  base = re.match(r'jax-(.+)-py3-none-any\.whl$',
                  os.path.basename(source)).group(1)
  path = os.path.join(out_dir, wheels.wheel_name(version))
  with zipfile.ZipFile(source) as zin, zipfile.ZipFile(path, 'w') as zout:
    for name in zin.namelist():
      if (name.startswith(PACKAGE) and name.endswith('.py')
          and '/' not in name[len(PACKAGE):]):
        text = shift + zin.read(name).decode('utf-8')
        if edit and edit[0] in text:
          text = text.replace(edit[0], edit[1], 1)
        zout.writestr(name, text)
      elif name in OUTSIDE:
        zout.writestr(name, zin.read(name))
      elif name == f'jax-{base}.dist-info/METADATA':
        meta = zin.read(name).decode('utf-8')
        zout.writestr(f'jax-{version}.dist-info/METADATA',
                      meta.replace(f'\nVersion: {base}\n',
                                   f'\nVersion: {version}\n'))
  return path


def tree_bytes(root):
  out = {}
  for d, _, files in os.walk(root):
    for n in files:
      with open(os.path.join(d, n), 'rb') as f:
        out[os.path.relpath(os.path.join(d, n), root)] = f.read()
  return out


@absltest.skipUnless(ONCE, 'runs once, with the newest jax release')
class PortTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.wheel_dir = tempfile.mkdtemp(prefix='port-test-wheels-')
    source = wheels.pristine_wheel(NEWEST)
    with zipfile.ZipFile(source) as zf:
      text = zf.read(PACKAGE + 'interpret_pallas_call.py').decode()
    assert text.count(REMOVED) == 1, 'the conflict test needs a new line'
    synthetic_wheel(source, '0.12.0.7', cls.wheel_dir, shift=SHIFT)
    synthetic_wheel(source, '0.12.0.8', cls.wheel_dir, shift=SHIFT,
                    edit=(REMOVED, '    target_local_core_id = -1\n'))
    synthetic_wheel(source, '0.12.0.9', cls.wheel_dir)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.wheel_dir, ignore_errors=True)
    super().tearDownClass()

  def setUp(self):
    super().setUp()
    self.tmp = tempfile.mkdtemp(prefix='port-test-')
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    self.patches = os.path.join(self.tmp, 'patches')
    shutil.copytree(PATCHES, self.patches)
    # port's default: docs/compatibility.md beside the patches folder.
    self.readme = os.path.join(self.tmp, 'docs', 'compatibility.md')
    os.makedirs(os.path.dirname(self.readme))
    shutil.copyfile(os.path.join(REPO, 'docs', 'compatibility.md'),
                    self.readme)

  def run_tool(self, *args, expect=0):
    # check is python -m migration's command; the others python -m jax_fork's.
    tool = 'migration' if args[0] == 'check' else 'jax_fork'
    proc = subprocess.run(
        [sys.executable, '-m', tool, *args,
         f'--patches_dir={self.patches}', f'--wheel_dir={self.wheel_dir}'],
        cwd=self.tmp, env=dict(os.environ, PYTHONPATH=REPO),
        capture_output=True, text=True, check=False)
    self.assertEqual(proc.returncode, expect,
                     f'stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}')
    return proc

  def test_shifted_release_gets_a_rebased_series_that_applies(self):
    proc = self.run_tool('port', '--version=0.12.0.7')
    self.assertIn('JAX_VERSION=0.12.0.7 TEST_SCOPE=kernels scripts/test.sh',
                  proc.stdout)
    manifest = manifest_lib.load(self.patches)
    series = manifest.series_for('0.12.0.7')
    self.assertEqual(series.name, 'jax-0.12.0.7')
    newest = manifest.series_for(NEWEST)
    self.assertEqual([p.subject for p in series.patches],
                     [p.subject for p in newest.patches])
    with open(os.path.join(series.directory, 'series'),
              encoding='utf-8') as f:
      self.assertIn('Ported from jax-0.12.0', f.read())
    data = json.loads(self.run_tool('check', '--version=0.12.0.7',
                                    '--json').stdout)
    (result,) = data['versions']
    self.assertEqual(result['series'], 'jax-0.12.0.7')
    self.assertEqual([p['result'] for p in result['patches']],
                     ['applies'] * len(newest.patches))
    with open(self.readme, encoding='utf-8') as f:
      self.assertIn('| 0.12.0.7 |', f.read())
    # The rebased series carries the same changes as the one it came from.
    self.run_tool('drift')

  def test_conflicting_release_changes_nothing_and_names_the_hunk(self):
    before = tree_bytes(self.tmp)
    proc = self.run_tool('port', '--version=0.12.0.8', expect=4)
    signal = next(p for p in manifest_lib.load(PATCHES).series_for(
        NEWEST).patches if 'signal the calling core' in p.subject)
    self.assertIn(signal.name, proc.stderr)
    self.assertIn('interpret/interpret_pallas_call.py:', proc.stderr)
    self.assertIn('hunk #1 (def semaphore_signal(', proc.stderr)
    self.assertIn('target_local_core_id = -1', proc.stderr)
    self.assertEqual(tree_bytes(self.tmp), before)

  def test_identical_release_joins_the_series(self):
    self.run_tool('port', '--version=0.12.0.9')
    manifest = manifest_lib.load(self.patches)
    self.assertEqual(manifest.series_for('0.12.0.9').name,
                     manifest.series_for(NEWEST).name)
    self.assertFalse(os.path.exists(
        os.path.join(self.patches, 'jax-0.12.0.9')))
    proc = self.run_tool('port', '--version=0.12.0.9', expect=2)
    self.assertIn('already served', proc.stderr)

  def test_bad_inputs(self):
    before = tree_bytes(self.tmp)
    self.run_tool('port', expect=2)
    self.run_tool('port', '--version=not-a-version', expect=2)
    self.run_tool('port', f'--version={NEWEST}', expect=2)
    self.assertEqual(tree_bytes(self.tmp), before)


if __name__ == '__main__':
  absltest.main()
