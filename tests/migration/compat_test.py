"""Tests of the compatibility table and of docs/compatibility.md's copy."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import check  # noqa: E402
from migration import compat  # noqa: E402
from migration import errors  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from migration import report  # noqa: E402
from migration import wheels  # noqa: E402

PATCHES = os.path.join(REPO, 'patches')
TABLE_DOC = os.path.join(REPO, 'docs', 'compatibility.md')
VERSION = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', '0.12.0.1')


class CompatTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(PATCHES)

  def test_table_doc_is_current(self):
    # Checks every served release against its released wheel, as
    # `check --all --readme=docs/compatibility.md` does, and compares with
    # docs/compatibility.md.
    results = check.check_versions(self.manifest,
                                   self.manifest.served_versions())
    features = compat.features(self.manifest)
    block = compat.markdown(
        features, compat.rows(self.manifest, results, features))
    with open(TABLE_DOC, encoding='utf-8') as f:
      doc = f.read()
    self.assertIn(compat.BEGIN, doc)
    self.assertEqual(
        compat.replace_block(doc, block), doc,
        'docs/compatibility.md\'s table is stale; regenerate it with '
        'python -m migration check --all --readme=docs/compatibility.md')
    for version in self.manifest.served_versions():
      self.assertIn(f'| {version} |', doc)

  def test_readme_has_no_table(self):
    # The table moved to docs/compatibility.md; README.md links to it.
    with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
      readme = f.read()
    self.assertNotIn(compat.END, readme)
    self.assertIn('docs/compatibility.md', readme)

  def test_rows_name_requirements_and_missing_patches(self):
    series = self.manifest.series_for(VERSION)
    fits = [check.PatchFit(p.name, check.Fit.EXACT) for p in series.patches]
    # A release whose series lacks a change (it lacks the API) shows it as
    # not applicable; a conflicting patch shows as a conflict.
    fits[0] = dataclasses.replace(fits[0], fit=check.Fit.CONFLICT)
    result = check.VersionCheck(VERSION, series.name, True,
                                wheels.wheel_name(VERSION),
                                tuple(fits[:-1]))
    features = compat.features(self.manifest)
    [row] = compat.rows(self.manifest, [result], features)
    self.assertLen(row.cells, len(features))
    # The series' patches are the first features; the check above gave all
    # but the last of them.
    given = len(fits) - 1
    self.assertEqual(row.cells[0], compat.CONFLICT)
    self.assertEqual(set(row.cells[1:given]), {compat.APPLIES})
    self.assertEqual(set(row.cells[given:len(fits)]), {compat.NOT_APPLICABLE})
    # The features of older series only: backports the release has upstream,
    # or changes it lacks.
    for feature, cell in zip(features[len(fits):], row.cells[len(fits):]):
      self.assertEqual(
          cell, compat.UPSTREAM if feature.applied_upstream
          and manifest_lib.version_key(VERSION)
          >= manifest_lib.version_key(feature.applied_upstream)
          else compat.NOT_APPLICABLE)
    req = wheels.requirements(wheels.pristine_wheel(VERSION))
    self.assertEqual((row.jaxlib, row.python), (req.jaxlib, req.python))
    self.assertRegex(row.python, r'^>=3\.\d+$')
    self.assertIn(VERSION.split('.')[1], row.jaxlib)
    text = report.compat_text(features, [row])
    self.assertIn(compat.NOT_APPLICABLE, text)
    self.assertIn(f'#5: {features[4].description}', text)

  def test_backport_is_upstream_from_its_applied_upstream_release(self):
    # The device_id backport is in the series of 0.10.0 to 0.11.2 only: its
    # DEP-3 Applied-Upstream names 0.12.0, whose interpreter has the change.
    features = compat.features(self.manifest)
    [backport] = [f for f in features if f.applied_upstream
                  and 'device_id' in f.subject]
    self.assertEqual(backport.applied_upstream, '0.12.0')
    self.assertNotIn(backport.subject, [
        p.subject for p in self.manifest.series_for('0.12.0.1').patches])
    rows = {}
    for version in ('0.12.0', '0.11.2', '0.9.2'):
      series = self.manifest.series_for(version)
      result = check.VersionCheck(
          version, series.name, True, wheels.wheel_name(version),
          tuple(check.PatchFit(p.name, check.Fit.EXACT)
                for p in series.patches))
      [rows[version]] = compat.rows(self.manifest, [result], features)
    index = features.index(backport)
    self.assertEqual(rows['0.12.0'].cells[index], compat.UPSTREAM)
    self.assertEqual(rows['0.11.2'].cells[index], compat.APPLIES)
    self.assertEqual(rows['0.9.2'].cells[index], compat.NOT_APPLICABLE)
    # A patch's `Applied-Upstream: no` is not a release: the two backports
    # are the only features with one.
    self.assertLen([f for f in features if f.applied_upstream], 2)

  def test_jaxlib_spec(self):
    spec = wheels._jaxlib_spec  # pylint: disable=protected-access
    self.assertEqual(spec(['jaxlib<=0.9.2,>=0.9.2']), '0.9.2')
    self.assertEqual(spec(['jaxlib<=0.12.0.1,>=0.11.2']),
                     '>=0.11.2,<=0.12.0.1')
    self.assertEqual(spec(['jaxlib (>=0.4.1)']), '>=0.4.1')
    self.assertEqual(
        spec(['jaxlib==0.7.2; extra == "cpu"', 'ml_dtypes>=0.5']), '')

  def test_replace_block(self):
    doc = f'intro\n{compat.BEGIN}\nold\n{compat.END}\nrest\n'
    block = f'{compat.BEGIN}\nnew\n{compat.END}'
    self.assertEqual(compat.replace_block(doc, block),
                     f'intro\n{block}\nrest\n')
    with self.assertRaisesRegex(errors.UsageError, 'no compatibility table'):
      compat.replace_block('no markers here', block)
    # A file with the first marker as it was in README.md is rewritten too.
    legacy = f'intro\n{compat.LEGACY_BEGIN}\nold\n{compat.END}\nrest\n'
    self.assertEqual(compat.replace_block(legacy, block),
                     f'intro\n{block}\nrest\n')

  def test_cli_readme_needs_all(self):
    proc = subprocess.run(
        [sys.executable, '-m', 'migration', 'check', f'--version={VERSION}',
         '--readme=docs/compatibility.md'],
        env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO,
        capture_output=True, text=True, check=False)
    self.assertEqual(proc.returncode, 2, proc.stderr)
    self.assertIn('--readme needs --all', proc.stderr)


if __name__ == '__main__':
  absltest.main()
