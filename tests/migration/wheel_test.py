"""Tests of `wheel`: the patched jax wheel, and it installed for real.

The end-to-end test makes a fresh venv with the patched wheel and jaxlib
from the package index (about 20 s), checks `pip check` and `status`, and
runs one example kernel that needs the patches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from absl.testing import absltest
import venv_util

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import errors  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from migration import wheelbuild  # noqa: E402
from migration import wheels  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')
VERSION = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', '0.12.0.1')


def _run(args, cwd, expect=0, **kwargs):
  proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                        check=False, **kwargs)
  if expect is not None and proc.returncode != expect:
    raise AssertionError(f'{args} exited {proc.returncode}:\n{proc.stdout}\n'
                         f'{proc.stderr}')
  return proc


class WheelTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)
    cls.series = cls.manifest.series_for(VERSION)
    cls.pristine = wheels.pristine_wheel(VERSION)
    cls.root = tempfile.mkdtemp(prefix='wheel-test-')
    cls.env = dict(os.environ, PYTHONPATH=REPO)
    cls.env.pop('JAX_INTERPRET_PATCHES_STATE_DIR', None)
    out = os.path.join(cls.root, 'dist')
    proc = _run([sys.executable, '-m', 'migration', 'wheel', '--json',
                 f'--version={VERSION}', '-o', out], cls.root,
                env=cls.env)
    cls.wheel = json.loads(proc.stdout)['wheel']

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_name_metadata_and_record(self):
    label = f'{VERSION}+interpret.{self.manifest.release}'
    self.assertEqual(os.path.basename(self.wheel),
                     f'jax-{label}-py3-none-any.whl')
    wheelbuild.verify_record(self.wheel)
    with zipfile.ZipFile(self.wheel) as zf, \
         zipfile.ZipFile(self.pristine) as released:
      names = set(zf.namelist())
      info = f'jax-{label}.dist-info'
      self.assertIn(f'{info}/METADATA', names)
      self.assertFalse(any(n.startswith(f'jax-{VERSION}.dist-info/')
                           for n in names))
      metadata = zf.read(f'{info}/METADATA').decode()
      self.assertIn(f'\nVersion: {label}\n', metadata)
      old = released.read(f'jax-{VERSION}.dist-info/METADATA').decode()
      self.assertEqual(metadata, old.replace(f'\nVersion: {VERSION}\n',
                                             f'\nVersion: {label}\n', 1))
      self.assertEqual(zf.read('jax/version.py'),
                       released.read('jax/version.py'))
      hashes = self.series.hashes[VERSION]
      for f, states in hashes.items():
        self.assertEqual(manifest_lib.sha256_bytes(zf.read(f)), states[-1])
      # Everything else is byte-identical to the release.
      for n in released.namelist():
        if n in hashes or '.dist-info/' in n:
          continue
        self.assertEqual(zf.read(n), released.read(n), n)

  def test_reproducible(self):
    out = os.path.join(self.root, 'again')
    again = wheelbuild.build(self.manifest, VERSION, out)
    self.assertEqual(wheels.sha256_file(again), wheels.sha256_file(self.wheel))

  def test_a_module_a_patch_adds_is_in_the_wheel_and_its_record(self):
    patches = os.path.join(self.root, 'adding-patches')
    venv_util.series_adding_a_module(patches, self.series, VERSION)
    manifest = manifest_lib.load(patches)
    wheel = wheelbuild.build(manifest, VERSION,
                             os.path.join(self.root, 'adding'))
    wheelbuild.verify_record(wheel)
    path, content = venv_util.ADDED_MODULE
    label = f'{VERSION}+interpret.{manifest.release}'
    with zipfile.ZipFile(wheel) as zf:
      self.assertEqual(zf.read(path), content)
      record = zf.read(f'jax-{label}.dist-info/RECORD').decode()
    self.assertIn(path, [row.split(',')[0] for row in record.splitlines()])

  def test_unsupported_version(self):
    with self.assertRaisesRegex(errors.UnsupportedError, 'not served'):
      wheelbuild.build(self.manifest, '0.6.0', self.root)
    proc = _run([sys.executable, '-m', 'migration', 'wheel',
                 '--version=0.6.0'], self.root, expect=3, env=self.env)
    self.assertIn('0.6.0 is not served', proc.stderr)

  def test_installed_with_jaxlib_runs_an_example(self):
    if VERSION != '0.12.0.1':
      self.skipTest('the example needs jax 0.12.0.1')
    if sys.version_info < (3, 12):
      self.skipTest('jax 0.12.0.1 with jaxlib needs Python 3.12')
    venv = os.path.join(self.root, 'venv')
    _run([sys.executable, '-m', 'venv', venv], self.root)
    python = os.path.join(venv, 'bin', 'python')
    _run([python, '-m', 'pip', 'install', '-q', '--disable-pip-version-check',
          self.wheel, f'jaxlib=={VERSION}'], self.root)
    _run([python, '-m', 'pip', 'check'], self.root)
    data = json.loads(_run(
        [sys.executable, '-m', 'migration', 'status', '--json',
         f'--python={python}'], self.root, env=self.env).stdout)
    self.assertEqual(data['state'], 'patched')
    self.assertTrue(data['patched_wheel'])
    self.assertEqual(data['environment']['jax'], VERSION)
    self.assertEqual(data['environment']['jax_dist_version'],
                     f'{VERSION}+interpret.{self.manifest.release}')
    # Already patched; and revert points to pip (the files match RECORD).
    _run([sys.executable, '-m', 'migration', 'apply', f'--python={python}'],
         self.root, env=self.env)
    proc = _run([sys.executable, '-m', 'migration', 'revert',
                 f'--python={python}'], self.root, expect=3, env=self.env)
    self.assertIn('pip install --force-reinstall', proc.stderr)
    example = os.path.join(REPO, 'examples', 'ring_all_gather.py')
    proc = _run([python, example], os.path.dirname(example), timeout=600)
    self.assertIn('ok', proc.stdout)
    self.assertNotIn('MISMATCH', proc.stdout)


if __name__ == '__main__':
  absltest.main()
