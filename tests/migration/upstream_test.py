"""Tests of the upstream export against a stand-in upstream repository.

The stand-in is a git repository made from the released jax wheel with only
the files the exported commits touch: the interpreter package,
``jax/version.py``, and minimal ``tests/pallas/BUILD`` and
``docs/pallas/CHANGELOG.md`` in upstream's format. No network is needed
beyond the wheel cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from migration import errors  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from migration import upstream  # noqa: E402
from migration import wheels  # noqa: E402

VERSION = '0.12.0.1'
TESTS_DIR = os.path.join(REPO, 'tests', 'pallas')

_BUILD = '''\
load(
    "//jaxlib:jax.bzl",
    "jax_multiplatform_test",
    "py_deps",
)

jax_multiplatform_test(
    name = "tpu_pallas_interpret_distributed_test",
    srcs = [
        "tpu_pallas_interpret_distributed_test.py",
    ],
    enable_backends = ["cpu"],
    deps = [
        "//jax/experimental:pallas",
        "//jax/experimental:pallas_tpu",
    ] + py_deps([
        "absl/testing",
        "numpy",
    ]),
)

jax_multiplatform_test(
    name = "tpu_paged_attention_kernel_test",
    srcs = ["tpu_paged_attention_kernel_test.py"],
)
'''

_CHANGELOG = '''\
# Pallas Changelog

## Unreleased

* Deprecations

  * Something else.

## Released with JAX 0.12.0

* Changes

  * Something released.
'''


def _git(args: list[str], cwd: str) -> str:
  return subprocess.run(
      ['git', '-c', 'user.name=t', '-c', 'user.email=t@example.com', *args],
      cwd=cwd, check=True, capture_output=True, text=True).stdout


class UpstreamExportTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.manifest = manifest_lib.load(os.path.join(REPO, 'patches'))
    cls.wheel = wheels.pristine_wheel(VERSION)

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp(prefix='upstream-test-')
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
    self.jax = os.path.join(self.root, 'jax')
    os.makedirs(os.path.join(self.jax, 'tests', 'pallas'))
    os.makedirs(os.path.join(self.jax, 'docs', 'pallas'))
    with zipfile.ZipFile(self.wheel) as zf:
      for name in zf.namelist():
        if (name.startswith('jax/_src/pallas/mosaic/interpret/')
            or name == 'jax/version.py'):
          zf.extract(name, self.jax)
    with open(os.path.join(self.jax, upstream.BUILD), 'w') as f:
      f.write(_BUILD)
    with open(os.path.join(self.jax, upstream.CHANGELOG), 'w') as f:
      f.write(_CHANGELOG)
    _git(['init', '-q'], self.jax)
    _git(['add', '-A'], self.jax)
    _git(['commit', '-q', '-m', 'upstream'], self.jax)
    self.head = _git(['rev-parse', 'HEAD'], self.jax)
    self.out = os.path.join(self.root, 'out')

  def export(self) -> list[str]:
    return upstream.export(self.jax, self.out, TESTS_DIR, self.manifest)

  def am(self, patches: list[str]) -> str:
    clone = os.path.join(self.root, 'clone')
    _git(['clone', '-q', self.jax, clone], self.root)
    _git(['am', '-q', '--keep-non-patch', *patches], clone)
    return clone

  def test_one_commit_per_feature_applies_with_git_am(self):
    patches = self.export()
    self.assertLen(patches, len(upstream.FEATURES))
    clone = self.am(patches)
    subjects = _git(['log', '--format=%s', f'-{len(upstream.FEATURES)}',
                     '--reverse'], clone)
    self.assertEqual(subjects.splitlines(),
                     [f.title for f in upstream.FEATURES])
    # The checkout itself is untouched and no worktree is left behind.
    self.assertEqual(_git(['rev-parse', 'HEAD'], self.jax), self.head)
    self.assertEqual(_git(['status', '--porcelain'], self.jax), '')
    self.assertLen(_git(['worktree', 'list'], self.jax).splitlines(), 1)

    # Each feature brings its interpreter change, tests, BUILD targets and a
    # changelog entry.
    with open(os.path.join(clone, upstream.BUILD)) as f:
      build = f.read()
    with open(os.path.join(clone, upstream.CHANGELOG)) as f:
      changelog = f.read()
    for feature in upstream.FEATURES:
      for test in feature.tests:
        self.assertIn(f'name = "{test[:-3]}"', build)
        with open(os.path.join(clone, 'tests', 'pallas', test)) as f:
          source = f.read()
        self.assertNotIn(upstream.HELPER, source)
        self.assertNotIn('test_util.', source.replace('jtu.', ''))
        self.assertIn('def fail_instead_of_hanging(', source)
        # Upstream gets the tests as they are at jax HEAD: no shims for
        # older releases.
        self.assertNotIn('Older jax releases', source)
        self.assertNotIn('At jax HEAD', source)
        self.assertNotIn('importlib', source)
        self.assertNotIn('def kernel(**kwargs)', source)
        self.assertIn('from jax._src.pallas.mosaic.interpret import '
                      'interpret_pallas_call as mosaic_interpret\n', source)
    unreleased = changelog.split('## Released')[0]
    self.assertIn(upstream.CHANGELOG_SECTION, unreleased)
    self.assertEqual(unreleased.count('  * TPU interpret mode'),
                     len(upstream.FEATURES))
    self.assertIn('Something else.', unreleased)
    # The targets are added after the interpret tests, before the others.
    self.assertLess(build.index('tpu_pallas_interpret_semaphore_test'),
                    build.index('tpu_paged_attention_kernel_test'))

    first = f'HEAD~{len(upstream.FEATURES) - 1}'
    message = _git(['log', '-1', '--format=%B', first], clone)
    self.assertIn('Mosaic TPU lowering still rejects', message)
    self.assertNotIn('Forwarded:', message)
    # The SparseCore feature is what the hardware does: its own note.
    message = _git(['log', '-1', '--format=%B', 'HEAD'], clone)
    self.assertIn('what SparseCore hardware does', message)
    self.assertNotIn('Mosaic TPU lowering still rejects', message)

  def test_exported_tests_pass_jax_lint_settings(self):
    try:
      import ruff  # noqa: F401  # pylint: disable=g-import-not-at-top
    except ImportError:
      self.skipTest('ruff is not installed')
    clone = self.am(self.export())
    proc = subprocess.run(
        [sys.executable, '-m', 'ruff', 'check', '--config',
         os.path.join(REPO, 'ruff.toml'), 'tests/pallas', 'jax/_src/pallas'],
        cwd=clone, capture_output=True, text=True, check=False)
    self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

  def test_for_jax_head(self):
    source = textwrap.dedent(f'''\
        import jax
        {upstream.OLDER_RELEASES_BEGIN}
        {upstream.AT_HEAD}import os
        import sys
        {upstream.OLDER_RELEASES_END}

        def f():
          {upstream.OLDER_RELEASES_BEGIN}
          {upstream.AT_HEAD}return os.sep
          return sys.platform
          {upstream.OLDER_RELEASES_END}

        test_util.kernel(mesh=m)(body)
        ''')
    self.assertEqual(upstream.for_jax_head(source), textwrap.dedent('''\
        import jax
        import os

        def f():
          return os.sep

        pl.kernel(mesh=m)(body)
        '''))
    with self.assertRaisesRegex(errors.PatchDataError, 'without'):
      upstream.for_jax_head(upstream.OLDER_RELEASES_BEGIN + '\n')

  def test_checkout_that_moved_on_gets_a_three_way_rebase(self):
    # Upstream edited a context line of a hunk of patch 0001: the patch no
    # longer applies exactly, but the change merges cleanly.
    target = os.path.join(
        self.jax, 'jax/_src/pallas/mosaic/interpret/shared_memory.py')
    old = '#  - If the count is equal to value, but there DMAs waiting to signal'
    new = '#  - If the count equals value, but there are DMAs waiting to signal'
    with open(target) as f:
      text = f.read()
    self.assertIn(old, text)
    with open(target, 'w') as f:
      f.write(text.replace(old, new))
    _git(['commit', '-q', '-am', 'upstream moved on'], self.jax)
    with self.assertRaises(errors.ConflictError):
      upstream.choose_series(self.manifest, self.jax)
    clone = self.am(self.export())
    with open(os.path.join(
        clone, 'jax/_src/pallas/mosaic/interpret/shared_memory.py')) as f:
      merged = f.read()
    self.assertIn(new, merged)
    self.assertIn('          if decrement:\n', merged)
    self.assertIn('detect_deadlocks', merged)

  def test_nearest_series_for_a_development_checkout(self):
    newest = max(self.manifest.series.values(), key=lambda s: max(
        manifest_lib.version_key(v) for v in s.hashes))
    self.assertIs(upstream.nearest_series(self.manifest, '99.0'), newest)
    self.assertIs(upstream.nearest_series(self.manifest, None), newest)
    for series in self.manifest.series.values():
      oldest = min(series.hashes, key=manifest_lib.version_key)
      self.assertIs(upstream.nearest_series(self.manifest, oldest), series)

  def test_no_series_applies_is_a_conflict_and_writes_nothing(self):
    target = os.path.join(
        self.jax, 'jax/_src/pallas/mosaic/interpret/shared_memory.py')
    with open(target) as f:
      text = f.read()
    # Upstream changed the very line that patch 0001 changes.
    line = '          self.count_by_core[global_core_id] -= value\n'
    self.assertIn(line, text)
    with open(target, 'w') as f:
      f.write(text.replace(line, line.replace('-= value', '-= int(value)')))
    _git(['commit', '-q', '-am', 'diverge'], self.jax)
    with self.assertRaisesRegex(
        errors.ConflictError,
        r'Feature nondecrementing-wait: .*shared_memory.py does not merge'
        r' cleanly'):
      self.export()
    self.assertFalse(os.path.exists(self.out))
    self.assertLen(_git(['worktree', 'list'], self.jax).splitlines(), 1)

  def test_not_a_jax_checkout(self):
    with self.assertRaisesRegex(errors.EnvironmentProblem,
                                'not a jax checkout'):
      upstream.export(self.root, self.out, TESTS_DIR, self.manifest)


if __name__ == '__main__':
  absltest.main()
