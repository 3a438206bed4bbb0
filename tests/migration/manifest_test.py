"""Tests of the manifest, the series files and the git apply wrapper."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import stat
import sys
import tempfile
import zipfile

from absl.testing import absltest

try:
  import tomllib
except ModuleNotFoundError:  # Python 3.10
  import tomli as tomllib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import errors  # noqa: E402
from migration import gitapply  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from jax_fork import manifest_gen  # noqa: E402
from migration import wheels  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')

_HEADER = """\
From 0123 Mon Sep 17 00:00:00 2001
From: A Person <a@example.com>
Subject: [PATCH 2/3] [pallas:tpu] Support a thing
 over two lines

Longer explanation.

Description: Support a thing.
 Continued here.
Origin: vendor
Forwarded: not-yet
Applied-Upstream: no
Last-Update: 2025-01-02
---
 a | 1 +
"""


class ManifestTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # Not create_tempdir(): it needs absl flags parsed, pytest does not.
    self.tmp = tempfile.mkdtemp(prefix='manifest-test-')
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

  def copy_patches(self) -> str:
    dest = os.path.join(self.tmp, 'patches')
    shutil.copytree(PATCHES, dest)
    return dest

  def test_parse_header(self):
    subject, dep3 = manifest_lib.parse_header(_HEADER)
    self.assertEqual(subject, '[pallas:tpu] Support a thing over two lines')
    self.assertEqual(dep3, {
        'Description': 'Support a thing.\nContinued here.',
        'Origin': 'vendor', 'Forwarded': 'not-yet',
        'Applied-Upstream': 'no', 'Last-Update': '2025-01-02'})

  def test_read_series_file(self):
    d = os.path.join(self.tmp, 's')
    os.makedirs(d)
    for name in ('a.patch', 'b.patch'):
      open(os.path.join(d, name), 'w').close()
    with open(os.path.join(d, 'series'), 'w') as f:
      f.write('# comment\n\na.patch\n  b.patch  # trailing\n')
    self.assertEqual(manifest_lib.read_series_file(d), ['a.patch', 'b.patch'])
    with open(os.path.join(d, 'series'), 'a') as f:
      f.write('missing.patch\n')
    with self.assertRaisesRegex(errors.PatchDataError, 'missing.patch'):
      manifest_lib.read_series_file(d)

  def test_locate_patches_dir(self):
    self.assertEqual(manifest_lib.locate_patches_dir(), PATCHES)
    self.assertEqual(manifest_lib.locate_patches_dir(self.tmp), self.tmp)
    with self.assertRaises(errors.PatchDataError):
      manifest_lib.locate_patches_dir(os.path.join(self.tmp, 'nope'))

  def test_every_patch_has_a_dep3_header(self):
    for series in manifest_lib.load(PATCHES).series.values():
      for p in series.patches:
        for field in ('Description', 'Origin', 'Forwarded', 'Last-Update'):
          self.assertIn(field, p.dep3, f'{p.name} lacks {field}')

  def test_touched_files_match_manifest(self):
    for series in manifest_lib.load(PATCHES).series.values():
      for p in series.patches:
        self.assertEqual(tuple(gitapply.touched_files(p.path)), p.files)
        for f in p.files:
          # The interpreter and its Pallas neighbours; 0042 (0024 in the
          # jax-0.10.2 series) also declares effects in jax.random's
          # primitives, and 0044 (0046 in the 0.11 series) fixes the
          # lowering of ordered effects in mlir.py.
          self.assertTrue(
              f.startswith('jax/_src/pallas/')
              or f in ('jax/_src/random/prng.py',
                       'jax/_src/interpreters/mlir.py'), f)

  def test_nearest_served_release(self):
    manifest = manifest_lib.load(PATCHES)
    served = manifest.served_versions()

    def line(v: str) -> int:
      major, minor = v.split('.')[:2]
      return int(major) * 1000 + int(minor)

    for version in ('0.6.2', '0.7.1', '0.13.0', '99.0'):
      nearest = manifest.nearest_served(version)
      self.assertIn(nearest, served)
      # On the closest line to `version`, and the newest release of it.
      self.assertEqual(abs(line(nearest) - line(version)),
                       min(abs(line(v) - line(version)) for v in served))
      self.assertEqual(nearest, max(
          (v for v in served if line(v) == line(nearest)),
          key=manifest_lib.version_key))
    self.assertEqual(manifest.nearest_served('0.7.1'), '0.7.2')
    self.assertEqual(manifest.nearest_served('0.13.0'), served[-1])
    self.assertIn('nearest served release is 0.7.2',
                  manifest.not_served_message('0.6.2'))
    # An unserved release is checked against the nearest one's series.
    self.assertIs(manifest.series_near('0.6.2'),
                  manifest.series_for('0.7.2'))

  def test_manifest_is_up_to_date(self):
    with open(os.path.join(PATCHES, manifest_lib.MANIFEST)) as f:
      committed = json.load(f)
    patches = self.copy_patches()
    path = os.path.join(patches, manifest_lib.MANIFEST)
    os.chmod(path, 0o644)
    regenerated = manifest_gen.generate(patches)
    self.assertEqual(regenerated, committed,
                     'patches/manifest.json is stale; run '
                     '`python -m jax_fork manifest`.')
    # Rewritten with the mode it had, not a temporary file's 0o600.
    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644)

  def test_load_rejects_edited_series(self):
    patches = self.copy_patches()
    series = manifest_lib.load(patches).series
    name = next(iter(series))
    with open(os.path.join(patches, name, 'series'), 'w') as f:
      f.write(series[name].patches[0].name + '\n')
    with self.assertRaisesRegex(errors.PatchDataError, 'jax_fork manifest'):
      manifest_lib.load(patches)

  def test_conflict_reports_gits_message_and_changes_nothing(self):
    manifest = manifest_lib.load(PATCHES)
    version = manifest.served_versions()[-1]
    series = manifest.series_for(version)
    patch = series.patches[0]
    target = patch.files[0]
    with zipfile.ZipFile(wheels.pristine_wheel(version)) as zf:
      data = zf.read(target)
    # Edit every context/removed line of the first hunk's region.
    with open(patch.path, encoding='utf-8') as f:
      hunk_line = next(ln for ln in f if ln.startswith('@@'))
    start = int(hunk_line.split()[1].split(',')[0][1:])
    lines = data.split(b'\n')
    for i in range(max(0, start - 1), min(len(lines), start + 6)):
      lines[i] = b'# edited ' + lines[i]
    edited = b'\n'.join(lines)
    dest = os.path.join(self.tmp, *target.split('/'))
    os.makedirs(os.path.dirname(dest))
    with open(dest, 'wb') as f:
      f.write(edited)
    with self.assertRaisesRegex(errors.ConflictError, 'patch failed|does not'):
      gitapply.apply(patch.path, self.tmp)
    with open(dest, 'rb') as f:
      self.assertEqual(f.read(), edited)

  def test_package_data_ships_every_patch_file(self):
    with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
      setuptools = tomllib.load(f)['tool']['setuptools']
    self.assertEqual(setuptools['package-dir']['migration.patches'], 'patches')
    globs = setuptools['package-data']['migration.patches']
    for series in manifest_lib.load(PATCHES).series.values():
      for rel in ['manifest.json', f'{series.name}/series',
                  *(f'{series.name}/{p.name}' for p in series.patches)]:
        self.assertTrue(any(fnmatch.fnmatch(rel, g) for g in globs), rel)


if __name__ == '__main__':
  absltest.main()
