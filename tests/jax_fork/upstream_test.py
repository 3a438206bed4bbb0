"""Tests of the upstream export against a stand-in upstream repository.

CI cannot reach upstream's repository, and upstream's files are not committed
here, so the stand-in is a git repository of the released jax wheel's
``jax/`` files plus minimal stand-ins for the files the export edits:
upstream's two TPU interpret test files (their imports and test classes). No
network is needed beyond the
wheel cache. The shape test runs once in CI (with the newest release).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock
import zipfile

from absl.testing import absltest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from jax_fork import bazel_deps  # noqa: E402
from jax_fork import pytest_runs  # noqa: E402
from jax_fork import upstream  # noqa: E402
from migration import errors  # noqa: E402
from migration import manifest as manifest_lib  # noqa: E402
from migration import wheels  # noqa: E402

VERSION = '0.12.0.1'
TESTS_DIR = os.path.join(REPO, 'tests', 'pallas')
_NEWEST = manifest_lib.load(os.path.join(REPO, 'patches')).served_versions()[-1]
ONCE = os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', _NEWEST) == _NEWEST

# Stand-ins with the imports and classes of upstream's files.
_HEADER = '''\
"""Stand-in for upstream's {name}."""

{stdlib}from absl.testing import absltest
from absl.testing import parameterized
import jax
{lax}from jax._src import test_util as jtu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as mosaic_interpret
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np


jax.config.parse_flags_with_absl()
{extra}
# Upstream's file uses all of its imports.
_USED = ({used}, parameterized, mosaic_interpret, pl, pltpu, jnp, np)


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class {cls}(jtu.JaxTestCase):

  def setUp(self):
    super().setUp()
    if not jtu.test_device_matches(['cpu']):
      self.skipTest('CPU-only test')

  def test_upstream(self):
    pass


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
'''
_INTERPRET_TEST = _HEADER.format(
    name='tpu_pallas_interpret_test.py',
    stdlib='import dataclasses\nimport functools\n\n', lax='', extra='',
    used='dataclasses, functools', cls='InterpretTest')
_DISTRIBUTED_TEST = _HEADER.format(
    name='tpu_pallas_interpret_distributed_test.py',
    stdlib='import functools\n\n',
    lax='from jax import lax\nfrom jax._src import shard_map\n',
    extra='jtu.request_cpu_devices(8)\n\nP = jax.sharding.PartitionSpec\n',
    used='functools, lax, shard_map, P', cls='InterpretDistributedTest')
_MEMORIES_TEST = '''\
# Copyright 2023 The JAX Authors.
"""A stand-in for upstream's tests/memories_test.py."""

import functools
from absl.testing import absltest
import jax
from jax._src import test_util as jtu
import numpy as np

jax.config.parse_flags_with_absl()

# Upstream's file uses all of its imports.
_USED = (functools, np)


class ShardingMemoriesTest(jtu.JaxTestCase):

  def setUp(self):
    super().setUp()
    self._default_memory_kind = "device"

  def test_upstream(self):
    pass


if __name__ == "__main__":
  absltest.main(testLoader=jtu.JaxTestLoader())
'''
_EXTEND_TEST = '''\
# Copyright 2023 The JAX Authors.
"""A stand-in for upstream's tests/extend_test.py."""

from absl.testing import absltest

import jax
import jax.extend as jex
import jax.numpy as jnp

from jax._src import test_util as jtu

jax.config.parse_flags_with_absl()

# Upstream's file uses all of its imports.
_USED = (jex, jnp)


class ExtendTest(jtu.JaxTestCase):

  def setUp(self):
    super().setUp()

  def test_upstream(self):
    pass


if __name__ == "__main__":
  absltest.main(testLoader=jtu.JaxTestLoader())
'''
# Stand-ins for upstream's BUILD files: the targets of the files the series
# changes and of the modules it imports, with upstream's deps lists (cut).
_BUILD_FILES = {
    'jax/_src/pallas/mosaic/interpret/BUILD': '''\
load("//jaxlib:jax.bzl", "py_deps", "pytype_strict_library")

pytype_strict_library(
    name = "params",
    srcs = ["params.py"],
    deps = [
        ":utils",
        "//jax",
    ] + py_deps("numpy"),
)

pytype_strict_library(
    name = "interpret_pallas_call",
    srcs = [
        "__init__.py",
        "interpret_pallas_call.py",
    ],
    deps = [
        ":params",
        ":shared_memory",
        "//jax",
        "//jax/_src:checkify",
        "//jax/_src/pallas",
        "//jax/_src/pallas/mosaic:core",
        "//jax/_src/pallas/mosaic:primitives",
        "//jax/_src/pallas/mosaic:tpu_info",
    ] + py_deps("numpy"),
)

pytype_strict_library(
    name = "shared_memory",
    srcs = ["shared_memory.py"],
    deps = [
        ":params",
        "//jax/_src:source_info_util",
    ] + py_deps([
        "numpy",
    ]),
)

pytype_strict_library(
    name = "race_detection_state",
    srcs = ["race_detection_state.py"],
    deps = [
        ":vector_clock",
        "//jax/_src:source_info_util",
    ],
)

pytype_strict_library(
    name = "thread_map",
    srcs = ["thread_map.py"],
    deps = [
        "//jax",
    ] + py_deps("numpy"),
)

pytype_strict_library(
    name = "utils",
    srcs = ["utils.py"],
    deps = [
        "//jax",
        "//jax/_src:core",
        "//jax/_src:source_info_util",
        "//jax/_src:util",
        "//jax/_src/pallas",
    ] + py_deps("numpy"),
)
''',
    'jax/BUILD': '''\
py_library_providing_imports_info(
    name = "jax",
    srcs = glob(
        [
            "*.py",
        ],
        exclude = [
            "*_test.py",
        ],
    ) + ["//jax/experimental:jax_public"],
)
''',
    'jax/_src/pallas/BUILD': '''\
pytype_strict_library(
    name = "pallas",
    srcs = [
        "__init__.py",
        "core.py",
        "primitives.py",
    ],
)
''',
    'jax/_src/pallas/mosaic/BUILD': '''\
pytype_strict_library(
    name = "core",
    srcs = [
        "__init__.py",
        "core.py",
    ],
)

pytype_strict_library(
    name = "error_handling",
    srcs = ["error_handling.py"],
)

pytype_strict_library(
    name = "lowering",
    srcs = ["lowering.py"],
)

pytype_strict_library(
    name = "pipeline",
    srcs = ["pipeline.py"],
)

pytype_strict_library(
    name = "random",
    srcs = ["random.py"],
    deps = [
        ":primitives",
    ],
)

pytype_strict_library(
    name = "sc_core",
    srcs = [
        "sc_core.py",
    ],
    deps = [
        "//jax",
    ],
)

pytype_strict_library(
    name = "sc_primitives",
    srcs = [
        "sc_primitives.py",
    ],
    deps = [
        ":sc_core",
    ],
)

pytype_strict_library(
    name = "tpu_info",
    srcs = ["tpu_info.py"],
    deps = [
        "//jax/_src:api",
    ],
)
''',
    'jax/_src/BUILD': '''\
pytype_strict_library(
    name = "api",
    srcs = [
        "api.py",
        "dispatch.py",
    ],
)

pytype_strict_library(
    name = "api_util",
    srcs = ["api_util.py"],
)

pytype_strict_library(
    name = "callback",
    srcs = ["callback.py"],
)

pytype_strict_library(
    name = "checkify",
    srcs = ["checkify.py"],
)

pytype_strict_library(
    name = "config",
    srcs = ["config.py"],
)

pytype_strict_library(
    name = "core",
    srcs = [
        "core.py",
        "linear_util.py",
    ],
)

pytype_strict_library(
    name = "dtypes",
    srcs = ["dtypes.py"],
)

pytype_strict_library(
    name = "effects",
    srcs = ["effects.py"],
)

pytype_strict_library(
    name = "flattree",
    srcs = ["flattree.py"],
)

pytype_strict_library(
    name = "mesh",
    srcs = ["mesh.py"],
)

pytype_strict_library(
    name = "mlir",
    srcs = ["interpreters/mlir.py"],
)

pytype_strict_library(
    name = "partial_eval",
    srcs = ["interpreters/partial_eval.py"],
)

pytype_strict_library(
    name = "random",
    srcs = [
        "random/__init__.py",
        "random/prng.py",
    ],
    deps = [
        ":api",
        ":core",
        ":util",
    ] + py_deps("numpy"),
)

pytype_strict_library(
    name = "sharding_impls",
    srcs = ["sharding_impls.py"],
)

pytype_strict_library(
    name = "source_info_util",
    srcs = ["source_info_util.py"],
    deps = [
        ":traceback_util",
    ],
)

pytype_strict_library(
    name = "state_types",
    srcs = [
        "state/__init__.py",
        "state/indexing.py",
        "state/types.py",
    ],
)

pytype_strict_library(
    name = "tree_util",
    srcs = ["tree_util.py"],
)

pytype_strict_library(
    name = "xla_bridge",
    srcs = [
        "xla_bridge.py",
    ],
)
''',
    'jax/experimental/BUILD': '''\
py_library_providing_imports_info(
    name = "experimental",
    srcs = [
        "__init__.py",
    ],
)

pytype_strict_library(
    name = "pallas",
    srcs = glob(
        [
            "pallas/**/*.py",
        ],
        exclude = [
            "pallas/tpu.py",
        ],
    ),
    deps = [
        "//jax",
    ],
)

pytype_strict_library(
    name = "pallas_tpu",
    srcs = ["pallas/tpu.py"],
    deps = [
        ":pallas",
    ],
)

pytype_strict_library(
    name = "pallas_tpu_sc",
    srcs = ["pallas/tpu_sc.py"],
    deps = [
        ":pallas",
    ],
)
''',
    'jax/extend/BUILD': '''\
pytype_strict_library(
    name = "extend",
    srcs = ["__init__.py"],
)
''',
    'tests/BUILD': '''\
jax_multiplatform_test(
    name = "extend_test",
    srcs = ["extend_test.py"],
    deps = ["//jax/extend"] + py_deps("absl/testing"),
)

jax_multiplatform_test(
    name = "memories_test",
    srcs = ["memories_test.py"],
    tags = ["multiaccelerator"],
    deps = [
        "//jax/experimental:compute_on",
    ] + py_deps([
        "absl/testing",
        "numpy",
    ]),
)
''',
    'tests/pallas/BUILD': '''\
jax_multiplatform_test(
    name = "tpu_pallas_interpret_test",
    srcs = [
        "tpu_pallas_interpret_test.py",
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
''',
}
_DEP3 = re.compile(r'^(Description|Origin|Forwarded|Applied-Upstream|'
                   r'Last-Update):', re.M)


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
    os.makedirs(self.jax)
    with zipfile.ZipFile(self.wheel) as zf:
      zf.extractall(self.jax, [n for n in zf.namelist()
                               if n.startswith('jax/')])
    for path, text in ((upstream.UPSTREAM_TEST[0], _INTERPRET_TEST),
                       (upstream.UPSTREAM_DISTRIBUTED_TEST[0],
                        _DISTRIBUTED_TEST),
                       (upstream.UPSTREAM_MEMORIES_TEST[0], _MEMORIES_TEST),
                       (upstream.UPSTREAM_EXTEND_TEST[0], _EXTEND_TEST),
                       *_BUILD_FILES.items()):
      os.makedirs(os.path.dirname(os.path.join(self.jax, path)),
                  exist_ok=True)
      with open(os.path.join(self.jax, path), 'w') as f:
        f.write(text)
    _git(['init', '-q'], self.jax)
    _git(['add', '-A'], self.jax)
    _git(['commit', '-q', '-m', 'upstream'], self.jax)
    self.head = _git(['rev-parse', 'HEAD'], self.jax).strip()
    self.out = os.path.join(self.root, 'out')
    # The author is the user's git identity; here, a test one.
    env = mock.patch.dict(os.environ, {
        'GIT_AUTHOR_NAME': 'A Contributor',
        'GIT_AUTHOR_EMAIL': 'contributor@example.com',
        'GIT_COMMITTER_NAME': 'A Contributor',
        'GIT_COMMITTER_EMAIL': 'contributor@example.com'})
    env.start()
    self.addCleanup(env.stop)

  def export(self) -> list[str]:
    return upstream.export(self.jax, self.out, TESTS_DIR, self.manifest)

  def am(self, patches: list[str]) -> str:
    clone = os.path.join(self.root, 'clone')
    _git(['clone', '-q', self.jax, clone], self.root)
    for patch in patches:
      _git(['am', '-q', '--keep-non-patch', patch], clone)
    return clone

  @absltest.skipUnless(ONCE, 'runs once, with the newest jax release')
  def test_stack_has_the_shape_upstream_takes(self):
    patches = self.export()
    series = upstream.choose_series(self.manifest, self.jax)
    # One commit per patch of the series, in order, each with its PR
    # description beside it.
    to_export = series.patches
    self.assertLen(patches, len(to_export))
    # The newest release has the backports (0043) upstream: its series
    # exports the other changes.
    own = [c for c in upstream.CHANGES if c.prefix is not None]
    self.assertEqual([p.name[:4] for p in to_export],
                     [c.prefix for c in own])
    self.assertLen(to_export, 55)
    for patch, written in zip(to_export, patches):
      self.assertEqual(os.path.basename(written)[:4], patch.name[:4])
      self.assertTrue(os.path.exists(written[:-len('.patch')] + '.md'))
    clone = self.am(patches)
    commits = _git(['rev-list', '--reverse', f'{self.head}..HEAD'],
                   clone).split()
    self.assertLen(commits, len(to_export))
    by_prefix = {c.prefix: c for c in own}
    for commit, patch in zip(commits, to_export):
      message = _git(['log', '-1', '--format=%B', commit], clone)
      subject = message.splitlines()[0]
      # A fix of jax itself (0042's random primitives, 0044's lowering) is
      # not tagged as Pallas's.
      if any(f.startswith('jax/_src/pallas/') for f in patch.files):
        self.assertRegex(subject, r'^\[Pallas\] In TPU Interpret Mode, ')
      else:
        self.assertNotIn('Pallas', subject)
      self.assertEqual(subject, patch.subject)
      self.assertNotRegex(message, _DEP3)
      self.assertEqual(_git(['log', '-1', '--format=%an <%ae>', commit],
                            clone).strip(),
                       'A Contributor <contributor@example.com>')
      # New files are modules of the interpreter, each with its target (tests
      # go to upstream's files); only allowed paths (no changelog), and
      # small enough to review: at most 700 changed lines unless its change
      # says why.
      for path in _git(['diff', '--name-only', '--diff-filter=A',
                        f'{commit}~1', commit], clone).split():
        self.assertRegex(path, r'^jax/_src/pallas/mosaic/interpret/\w+\.py$')
        self.assertIn(f'+    srcs = ["{os.path.basename(path)}"],', _git(
            ['show', commit, '--', os.path.dirname(path) + '/BUILD'], clone))
      changed = 0
      for line in _git(['diff', '--numstat', f'{commit}~1', commit],
                       clone).splitlines():
        plus, minus, path = line.split('\t')
        self.assertTrue(path.startswith(upstream.ALLOWED_PATHS), path)
        self.assertNotIn('CHANGELOG', path)
        changed += int(plus) + int(minus)
      limit, reason = by_prefix[patch.name[:4]].max_changed_lines
      self.assertLessEqual(changed, limit, subject)
      self.assertEqual(limit > 700, bool(reason), subject)
    # The checkout itself is untouched and no worktree is left behind.
    self.assertEqual(_git(['rev-parse', 'HEAD'], self.jax).strip(),
                     self.head)
    self.assertEqual(_git(['status', '--porcelain'], self.jax), '')
    self.assertLen(_git(['worktree', 'list'], self.jax).splitlines(), 1)

    # Every test class of ours is a class of upstream's file, with the same
    # methods, without the code for older releases; upstream's own class is
    # kept as it was.
    ours = set()
    for change in upstream.CHANGES:
      if change.prefix is None:
        continue  # a backport: the newest release has it upstream
      for test in change.tests:
        with open(os.path.join(TESTS_DIR, test.file)) as f:
          ours |= {(test.upstream[0], test.name, n) for n, _ in
                   upstream.extract_methods(f.read(), test.name)}
    exported = set()
    for path, cls in (upstream.UPSTREAM_TEST,
                      upstream.UPSTREAM_DISTRIBUTED_TEST,
                      (upstream.UPSTREAM_MEMORIES_TEST[0],
                       'ShardingMemoriesTest'),
                      (upstream.UPSTREAM_EXTEND_TEST[0], 'ExtendTest')):
      with open(os.path.join(clone, path)) as f:
        source = f.read()
      for marker in ('Older jax releases', 'At jax HEAD', upstream.HELPER,
                     'test_util.', 'fail_instead_of_hanging',
                     'interpret._shared_memory', 'dataclasses.fields',
                     'time.sleep'):
        self.assertNotIn(marker, source.replace('jtu.', ''))
      classes = [n for n in ast.parse(source).body
                 if isinstance(n, ast.ClassDef)]
      self.assertEqual(classes[0].name, cls)
      self.assertEqual(
          [n.name for n in classes[0].body if isinstance(n, ast.FunctionDef)],
          ['setUp', 'test_upstream'])
      for klass in classes[1:]:
        self.assertEqual([ast.unparse(b) for b in klass.bases],
                         ['jtu.JaxTestCase'])
        names = [n.name for n in klass.body
                 if isinstance(n, ast.FunctionDef)]
        # A setUp where upstream's class or ours has one (not in the tests
        # of jax itself: their upstream classes' are not taken), first.
        self.assertEqual('setUp' in names,
                         path not in (upstream.UPSTREAM_MEMORIES_TEST[0],
                                      upstream.UPSTREAM_EXTEND_TEST[0]))
        self.assertNotIn('setUp', names[1:])
        self.assertLen(set(names), len(names))
        exported |= {(path, klass.name, n) for n in names if n != 'setUp'}
    self.assertEqual(exported, ours)

  @absltest.skipUnless(ONCE, 'runs once, with the newest jax release')
  def test_bazel_runs_maintenance_only_releases_on_their_patches_tests(self):
    # tests/pallas/BUILD.bazel makes targets for the releases of
    # MAINTENANCE_ONLY_VERSIONS (bazel/defs.bzl) only for the test files of
    # the patches their series have.
    versions = self.bzl_list('bazel/defs.bzl', 'MAINTENANCE_ONLY_VERSIONS')
    files = self.bzl_list('tests/pallas/BUILD.bazel', 'MAINTENANCE_ONLY_FILES')
    manifest = manifest_lib.load(os.path.join(REPO, 'patches'))
    counts = {len(manifest.series_for(v).patches) for v in versions}
    self.assertLen(counts, 1, 'maintenance-only series of different lengths')
    expected = {t.file for change in upstream.CHANGES[:counts.pop()]
                for t in change.tests}
    self.assertEqual(sorted(files), sorted(expected))

  def bzl_list(self, path, name):
    """The strings of the list `name = [...]` in a Bazel file of the repo."""
    with open(os.path.join(REPO, path)) as f:
      text = f.read()
    match = re.search(rf'^{name} = \[(.*?)\]', text, re.M | re.S)
    self.assertIsNotNone(match, f'{name} in {path}')
    return re.findall(r'"([^"]+)"', match.group(1))

  def test_carried_test_files(self):
    # scripts/run_tests.py runs only these files of tests/pallas: on the
    # newest series all of them but those of changes that only older series
    # have (no prefix, not upstream in a newer release: #58, #59), on the
    # maintenance-only ones the files tests/pallas/BUILD.bazel gives their
    # Bazel targets.
    manifest = manifest_lib.load(os.path.join(REPO, 'patches'))
    every_file = sorted(f for f in os.listdir(TESTS_DIR)
                        if f.endswith('_test.py'))
    newest = manifest.series_for(_NEWEST)
    carried = upstream.carried_test_files(manifest, newest)
    older_only = {t.file for c in upstream.CHANGES if c.prefix is None
                  for t in c.tests} - carried
    self.assertEqual(older_only,
                     {'tpu_pallas_interpret_prng_unsupported_test.py',
                      'tpu_pallas_interpret_ref_view_unsupported_test.py'})
    self.assertEqual(sorted(carried | older_only), every_file)
    for file in older_only:
      self.assertTrue(any(file in upstream.carried_test_files(manifest, s)
                          for s in manifest.series.values()), file)
    maintenance = self.bzl_list('tests/pallas/BUILD.bazel',
                                'MAINTENANCE_ONLY_FILES')
    for version in self.bzl_list('bazel/defs.bzl',
                                 'MAINTENANCE_ONLY_VERSIONS'):
      with self.subTest(version=version):
        self.assertEqual(
            sorted(upstream.carried_test_files(
                manifest, manifest.series_for(version))),
            sorted(maintenance))
    for series in manifest.series.values():
      with self.subTest(series=series.name):
        files = upstream.carried_test_files(manifest, series)
        self.assertLessEqual(files, set(every_file))
        self.assertGreaterEqual(len(files), len(maintenance))
    # A backport's tests run where its patch is and where upstream has the
    # change (0.12.0 has both backports'), not on the maintenance-only series.
    upstream_has = {p.subject for s in manifest.series.values()
                    for p in s.patches if p.applied_upstream is not None}
    backports = [c for c in upstream.CHANGES if c.subject in upstream_has]
    self.assertLen(backports, 2)
    for backport in backports:
      (backport_file,) = {t.file for t in backport.tests}
      for version, carried in (('0.12.0.1', True), ('0.11.2', True),
                               ('0.10.0', True), ('0.9.2', False)):
        with self.subTest(version=version, file=backport_file):
          series = manifest.series_for(version)
          self.assertEqual(
              backport_file in upstream.carried_test_files(manifest, series),
              carried)
          self.assertEqual(
              any(p.subject == backport.subject for p in series.patches),
              carried and version != '0.12.0.1')
    # A change of the older series only (#58) runs where its patch is.
    for version, carried in (('0.12.0.1', False), ('0.11.2', False),
                             ('0.10.2', True), ('0.10.0', True),
                             ('0.9.2', False)):
      with self.subTest(version=version, older_only=True):
        self.assertEqual(
            older_only <= upstream.carried_test_files(
                manifest, manifest.series_for(version)), carried)
    # A patch that neither the newest series nor a backport has is an error,
    # not a silent skip.
    series = manifest.series_for('0.10.2')
    renamed = dataclasses.replace(series.patches[0], subject='[Pallas] Gone.')
    with self.assertRaisesRegex(errors.PatchDataError, 'Gone'):
      upstream.carried_test_files(manifest, dataclasses.replace(
          series, patches=(renamed, *series.patches[1:])))

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

        test_util.kernel(mesh=test_util.tensorcore_mesh(axis_name='c'))(body)
        ''')
    self.assertEqual(upstream.for_jax_head(source), textwrap.dedent('''\
        import jax
        import os

        def f():
          return os.sep

        pl.kernel(mesh=pltpu.TensorCoreMesh(axis_name='c'))(body)
        '''))
    with self.assertRaisesRegex(errors.PatchDataError, 'without'):
      upstream.for_jax_head(upstream.OLDER_RELEASES_BEGIN + '\n')

  def test_add_test_class_checks_names_and_adds_imports(self):
    ours = textwrap.dedent('''\
        import io
        from jax.experimental.pallas.ops.tpu import random  # noqa: F401
        import tpu_interpret_test_util as test_util
        from tpu_interpret_test_util import mosaic_interpret


        class Ours(test_util.InterpretTestCase):

          # The kernel of another class's tests.
          _kernel = InterpretTest.test_upstream

          def setUp(self):
            super().setUp()
            # Older jax releases: begin.
            self.skipTest('old')
            # Older jax releases: end.
            self.x = io.StringIO()

          # Reads a buffer.
          @parameterized.parameters(1, 2)
          def test_a(self, n):
            return io.StringIO(str(n)), mosaic_interpret

          # Older jax releases only: an API that jax HEAD removed.
          def test_old_api(self):
            pass
        ''')
    methods = upstream.extract_methods(ours, 'Ours')
    self.assertEqual([n for n, _ in methods], ['test_a'])
    self.assertTrue(methods[0][1].startswith('  # Reads a buffer.\n  @'))
    attributes = upstream.extract_attributes(ours, 'Ours')
    self.assertEqual(attributes, [
        '  # The kernel of another class\'s tests.\n'
        '  _kernel = InterpretTest.test_upstream\n'])
    set_up = upstream.extract_set_up(ours, 'Ours')
    self.assertEqual(set_up, ['    self.x = io.StringIO()\n'])
    side_effects = upstream.side_effect_imports(ours)
    self.assertEqual(side_effects, [
        'from jax.experimental.pallas.ops.tpu import random  # noqa: F401'])
    source = upstream.add_test_class(
        _INTERPRET_TEST, 'InterpretTest', 'Ours', methods,
        upstream.import_lines(ours), side_effects, attributes, set_up)
    self.assertIn('import dataclasses\nimport functools\nimport io\n',
                  source)
    # The import made for its effect (registering a PRNG implementation) is
    # added, among the jax imports.
    self.assertEqual(source.count(side_effects[0] + '\n'), 1)
    self.assertLess(source.index('from jax.experimental.pallas import tpu'),
                    source.index(side_effects[0]))
    self.assertEqual(source.count('as mosaic_interpret\n'), 1)
    # A class of its own after upstream's, with upstream's decorators and
    # setUp, then ours.
    self.assertIn(textwrap.dedent('''\
            pass


        @jtu.thread_unsafe_test_class()
        class Ours(jtu.JaxTestCase):

          def setUp(self):
            super().setUp()
            if not jtu.test_device_matches(['cpu']):
              self.skipTest('CPU-only test')
            self.x = io.StringIO()

          # The kernel of another class's tests.
          _kernel = InterpretTest.test_upstream

          # Reads a buffer.
          @parameterized.parameters(1, 2)
          def test_a(self, n):
        '''), source)
    self.assertLess(source.index('class InterpretTest('),
                    source.index('class Ours('))
    self.assertLess(source.index('class Ours('),
                    source.index("if __name__ == '__main__':"))
    compile(source, 'test.py', 'exec')
    with self.assertRaisesRegex(errors.PatchDataError, 'already has a class'):
      upstream.add_test_class(source, 'InterpretTest', 'Ours', methods, {})
    unknown = [('test_b', '  def test_b(self):\n    return _helper()\n')]
    with self.assertRaisesRegex(errors.PatchDataError,
                                "Ours.test_b uses _helper, which upstream's"):
      upstream.add_test_class(_INTERPRET_TEST, 'InterpretTest', 'Ours',
                              unknown, {})
    with self.assertRaisesRegex(errors.PatchDataError, 'no test class Nope'):
      upstream.add_test_class(_INTERPRET_TEST, 'Nope', 'Ours', methods, {})

  @absltest.skipUnless(ONCE, 'runs once, with the newest jax release')
  def test_older_checkout_gets_the_newest_release_as_its_base(self):
    # A checkout older than the newest release (as the mirror is): its
    # version and an interpreter line the series' context needs differ.
    edits = {
        'jax/version.py': ('_version = "0.12.0.1"', '_version = "0.11.1"'),
        'jax/_src/pallas/mosaic/interpret/shared_memory.py': (
            '          self.count_by_core[global_core_id] -= value\n',
            '          self.count_by_core[global_core_id] -= int(value)\n'),
    }
    for path, (old, new) in edits.items():
      with open(os.path.join(self.jax, path)) as f:
        text = f.read()
      self.assertIn(old, text)
      with open(os.path.join(self.jax, path), 'w') as f:
        f.write(text.replace(old, new))
    _git(['commit', '-q', '-am', 'an older upstream'], self.jax)
    self.head = _git(['rev-parse', 'HEAD'], self.jax).strip()
    release = upstream.newest_release(self.manifest, self.jax)
    self.assertEqual(release, _NEWEST)
    patches = upstream.export(self.jax, self.out, TESTS_DIR, self.manifest,
                              base_release=release)
    newest = self.manifest.series_for(_NEWEST)
    self.assertLen(patches, 1 + len(newest.patches))
    self.assertRegex(os.path.basename(patches[0]),
                     r'^0000-Base-jax-as-the-jax-.*\.patch$')
    with open(patches[0][:-len('.patch')] + '.md') as f:
      self.assertIn('Not a pull request', f.read())
    with open(patches[1][:-len('.patch')] + '.md') as f:
      self.assertIn(f'It applies on upstream {self.head[:7]}', f.read())
    # The base gives back the release's files; the series applies on it
    # exactly, as on the release.
    clone = self.am(patches)
    with zipfile.ZipFile(self.wheel) as zf:
      for path in edits:
        self.assertNotEqual(_git(['show', f'{self.head}:{path}'], clone),
                            zf.read(path).decode())
        self.assertEqual(_git(['show', f'HEAD~{len(newest.patches)}:{path}'],
                              clone), zf.read(path).decode())
    base = _git(['log', '-1', '--format=%B', f'HEAD~{len(newest.patches)}'],
                clone)
    self.assertIn('(not for submission)', base)
    # A checkout at the release needs no base.
    self.assertIsNone(upstream.newest_release(self.manifest, clone))

  def test_base_release_must_be_served(self):
    with self.assertRaisesRegex(errors.UsageError, 'not served'):
      upstream.export(self.jax, self.out, TESTS_DIR, self.manifest,
                      base_release='0.6.0')
    self.assertFalse(os.path.exists(self.out))

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
    # Upstream changed the very line that the non-decrementing wait changes.
    line = '          self.count_by_core[global_core_id] -= value\n'
    self.assertIn(line, text)
    with open(target, 'w') as f:
      f.write(text.replace(line, line.replace('-= value', '-= int(value)')))
    _git(['commit', '-q', '-am', 'diverge'], self.jax)
    with self.assertRaisesRegex(
        errors.ConflictError,
        r'0003-[^:]*: .*shared_memory.py does not merge cleanly'):
      self.export()
    self.assertFalse(os.path.exists(self.out))
    self.assertLen(_git(['worktree', 'list'], self.jax).splitlines(), 1)

  def test_commit_message_drops_the_dep3_header(self):
    series = self.manifest.series_for(VERSION)
    for patch in series.patches:
      message = upstream.commit_message(patch)
      self.assertTrue(message.startswith(patch.subject + '\n\n'))
      self.assertNotRegex(message, _DEP3)
      with open(patch.path) as f:
        self.assertRegex(f.read(), _DEP3)

  def test_exported_messages_are_a_subject_and_a_short_summary(self):
    series = self.manifest.series_for(VERSION)
    by_subject = upstream.changes_by_subject(self.manifest)
    for patch in series.patches:
      summary = by_subject[patch.subject].summary
      # One to three sentences, as upstream's interpreter commits have.
      sentences = re.findall(r'[.!?](?:\s|$)', summary.replace('e.g. ', ''))
      self.assertBetween(len(sentences), 1, 3, patch.subject)
      self.assertLessEqual(len(summary.split()), 70, patch.subject)
      message = upstream.commit_message(patch, summary)
      subject, body = message.split('\n\n', 1)
      self.assertEqual(subject, patch.subject)
      self.assertEqual(' '.join(body.split()), ' '.join(summary.split()))
      self.assertLessEqual(max(map(len, body.splitlines())), 72)
      # The patch's own message says more.
      self.assertGreater(len(upstream.commit_message(patch)), len(message))

  def test_build_files_list_the_modules_a_commit_imports(self):
    patches = self.export()
    clone = self.am(patches)
    commits = _git(['rev-list', '--reverse', f'{self.head}..HEAD'],
                   clone).split()
    # The commit that makes the interpreter import the SparseCore modules,
    # and puts the SparseCore tests (which import tpu_sc) in upstream's file.
    (sparsecore,) = [
        c for c in commits if '\n+from jax._src.pallas.mosaic import sc_core\n'
        in _git(['show', c], clone)]
    self.assertIn('\n+from jax.experimental.pallas import tpu_sc as plsc\n',
                  _git(['show', sparsecore], clone))
    build_diff = _git(['show', '--format=', sparsecore, '--', '*BUILD'],
                      clone)
    self.assertEqual(
        [l for l in build_diff.splitlines()
         if l.startswith(('+', '-')) and not l.startswith(('+++', '---'))],
        ['+        "//jax/_src/pallas/mosaic:sc_core",',
         '+        "//jax/_src/pallas/mosaic:sc_primitives",',
         '+        "//jax/experimental:pallas_tpu_sc",'])
    # At the top of the stack: the labels at their sorted places in the
    # targets that import them, and nothing else changed (shared_memory's
    # new import of source_info_util is already listed); jax/experimental is
    # not touched.
    interpret = _BUILD_FILES['jax/_src/pallas/mosaic/interpret/BUILD']
    tests = _BUILD_FILES['tests/pallas/BUILD']
    jax_src = _BUILD_FILES['jax/_src/BUILD']
    expected = {
        # 0042's PRNG primitives trace the implementation's functions.
        'jax/_src/BUILD': jax_src.replace(
            '        ":api",\n        ":core",\n        ":util",\n',
            '        ":api",\n        ":api_util",\n        ":core",\n'
            '        ":effects",\n        ":partial_eval",\n'
            '        ":util",\n'),
        'jax/_src/pallas/mosaic/interpret/BUILD': interpret.replace(
            '        "//jax/_src/pallas/mosaic:primitives",\n',
            # 0040 raises Mosaic's MosaicError for narrow integer arithmetic.
            '        "//jax/_src/pallas/mosaic:error_handling",\n'
            '        "//jax/_src/pallas/mosaic:primitives",\n'
            '        "//jax/_src/pallas/mosaic:random",\n'
            '        "//jax/_src/pallas/mosaic:sc_core",\n'
            '        "//jax/_src/pallas/mosaic:sc_primitives",\n').replace(
            '        "//jax/_src:checkify",\n        "//jax/_src/pallas",\n',
            # 0047's dma_semaphore_count reads the dtype's width.
            '        "//jax/_src:checkify",\n        "//jax/_src:dtypes",\n'
            '        "//jax/_src:mesh",\n        "//jax/_src:random",\n'
            '        "//jax/_src:state_types",\n'
            '        "//jax/_src/pallas",\n').replace(
            '        "//jax/_src:core",\n',
            '        "//jax/_src:api",\n        "//jax/_src:callback",\n'
            '        "//jax/_src:config",\n        "//jax/_src:core",\n'
            '        "//jax/_src:dtypes",\n        "//jax/_src:mesh",\n'
            '        "//jax/_src:mlir",\n        "//jax/_src:sharding_impls",\n'
            ).replace(
            '        "//jax/_src:util",\n',
            '        "//jax/_src:tree_util",\n        "//jax/_src:util",\n'
            '        "//jax/_src:xla_bridge",\n').replace(
            '        ":utils",\n        "//jax",\n'
            '    ] + py_deps("numpy"),\n)\n\n'
            'pytype_strict_library(\n    name = "interpret_pallas_call",',
            '        ":utils",\n        "//jax",\n'
            '        "//jax/_src/pallas/mosaic:tpu_info",\n'
            '    ] + py_deps("numpy"),\n)\n\n'
            'pytype_strict_library(\n    name = "interpret_pallas_call",'
            ).replace(
            # 0049's race reports format ranges with `utils.format_range`.
            '        ":vector_clock",\n        "//jax/_src:source_info_util",\n',
            '        ":utils",\n        ":vector_clock",\n'
            '        "//jax/_src:source_info_util",\n').replace(
            '        ":shared_memory",\n        "//jax",\n'
            '        "//jax/_src:checkify",\n',
            '        ":shared_memory",\n        ":vmem_limits",\n'
            '        "//jax",\n        "//jax/_src:checkify",\n')
        # 0052's checks of Mosaic's VMEM limits are a module of their own,
        # which raises Mosaic's LoweringException for pl.Buffered(3).
        + '\npytype_strict_library(\n    name = "vmem_limits",\n'
        '    srcs = ["vmem_limits.py"],\n    deps = [\n'
        '        "//jax",\n        "//jax/_src:core",\n'
        '        "//jax/_src:dtypes",\n        "//jax/_src:partial_eval",\n'
        '        "//jax/_src/pallas",\n        "//jax/_src/pallas/mosaic:core",\n'
        '        "//jax/_src/pallas/mosaic:lowering",\n'
        '        "//jax/_src/pallas/mosaic:tpu_info",\n'
        '    ] + py_deps("numpy"),\n)\n',
        'tests/pallas/BUILD': tests.replace(
            '    deps = [\n        "//jax/experimental:pallas",\n'
            '        "//jax/experimental:pallas_tpu",\n    ] + py_deps([\n'
            '        "absl/testing",\n        "numpy",\n    ]),\n)\n\n'
            'jax_multiplatform_test(\n'
            '    name = "tpu_pallas_interpret_distributed_test",',
            # 0042's test imports jax.experimental and jax.extend.
            '    deps = [\n        "//jax/experimental",\n'
            '        "//jax/experimental:pallas",\n'
            '        "//jax/experimental:pallas_tpu",\n'
            '        "//jax/experimental:pallas_tpu_sc",\n'
            '        "//jax/extend",\n    ] + py_deps([\n'
            '        "absl/testing",\n        "numpy",\n    ]),\n)\n\n'
            'jax_multiplatform_test(\n'
            '    name = "tpu_pallas_interpret_distributed_test",'),
        # 0044's test in tests/memories_test.py imports io_callback.
        'tests/BUILD': _BUILD_FILES['tests/BUILD'].replace(
            '    deps = [\n',
            '    deps = [\n        "//jax/experimental",\n'),
    }
    self.assertNotEqual(expected['tests/pallas/BUILD'], tests)
    self.assertNotEqual(expected['jax/_src/BUILD'], jax_src)
    for path, text in _BUILD_FILES.items():
      with open(os.path.join(clone, path)) as f:
        self.assertEqual(f.read(), expected.get(path, text), path)

  def test_descriptions_give_the_counts_they_measure(self):
    # A stand-in Python whose "pytest" passes every test function of the file
    # it is given (but the deselected ones), and cannot run the GPU file.
    gpu = os.path.join(self.jax, 'tests/pallas/gpu_pallas_interpret_test.py')
    with open(gpu, 'w') as f:
      f.write('def test_gpu():\n  pass\n')
    _git(['add', '-A'], self.jax)
    _git(['commit', '-q', '-m', 'gpu tests'], self.jax)
    self.head = _git(['rev-parse', 'HEAD'], self.jax).strip()
    python = os.path.join(self.root, 'bin', 'python')
    os.makedirs(os.path.dirname(python))
    with open(python, 'w') as f:
      f.write(f'''#!{sys.executable}
import re, sys
if sys.argv[1] == '-c':
  print('0.11.1 3.12.1')
  sys.exit(0)
args = sys.argv[sys.argv.index('no:cacheprovider') + 1:]
if 'gpu' in args[0]:
  print('INTERNALERROR> boom')
  sys.exit(3)
names = re.findall(r'^  def (test\\w*)', open(args[0]).read(), re.M)
kept = [n for n in names if '-k' not in args or 'emit_pipeline' not in n]
print(f'{{len(kept)}} passed, {{len(names) - len(kept)}} deselected in 0.1s')
''')
    os.chmod(python, 0o755)
    patches = upstream.export(self.jax, self.out, TESTS_DIR, self.manifest,
                              test_python=python)
    clone = self.am(patches)
    commits = _git(['rev-list', '--reverse', f'{self.head}..HEAD'],
                   clone).split()

    def count(commit: str, path: str) -> int:
      return len(re.findall(r'^  def (test\w*)',
                            _git(['show', f'{commit}:{path}'], clone), re.M))

    interpret = upstream.UPSTREAM_TEST[0]
    for patch, commit in zip(patches, commits):
      with open(patch[:-len('.patch')] + '.md') as f:
        description = f.read()
      self.assertNotIn('Not measured', description)
      before, after = count(f'{commit}~1', interpret), count(commit, interpret)
      self.assertIn(
          f'| `PYTHONPATH=$PWD python -m pytest -q {interpret}` | '
          f'{before} passed | {after} passed | 0 |', description)
      self.assertIn('-k \'not emit_pipeline\'` |', description)
      self.assertIn('(CPU, jaxlib 0.11.1, Python 3.12.1, PYTHONPATH set to '
                    'the checkout)', description)
      # The run that could not count says so, with no number.
      self.assertIn(
          '| `PYTHONPATH=$PWD python -m pytest -q '
          'tests/pallas/gpu_pallas_interpret_test.py` | not measured (pytest '
          'exit code 3: INTERNALERROR> boom) | not measured (pytest exit code '
          '3: INTERNALERROR> boom) | not known |', description)

  def test_descriptions_without_measuring_claim_no_results(self):
    for patch in self.export():
      with open(patch[:-len('.patch')] + '.md') as f:
        how = f.read().split('## How it was tested\n')[1]
      self.assertTrue(how.startswith('\nNot measured: this export ran '
                                     'without `--test_python`'), how)
      self.assertNotRegex(how, r'\d+ (passed|failed|skipped)')

  def test_descriptions_list_test_methods_not_helpers(self):
    # InterpretFreeBuffersTest has a helper, `_held_after_calls`.
    listed = {}
    for patch in self.export():
      with open(patch[:-len('.patch')] + '.md') as f:
        added = f.read().split('Tests added (a class per change):\n\n')[1]
      for line in added.split('\n\n')[0].splitlines():
        cls, _, methods = line.partition(': ')
        listed[cls] = methods.split(', ')
    free = listed['- `InterpretFreeBuffersTest` in '
                  '`tests/pallas/tpu_pallas_interpret_test.py`']
    self.assertIn('`test_an_inputs_buffer_is_freed`', free)
    self.assertNotIn('`_held_after_calls`', free)
    for methods in listed.values():
      for m in methods:
        self.assertTrue(m.startswith('`test'), m)

  def test_test_python_that_is_not_an_executable(self):
    with self.assertRaisesRegex(errors.UsageError,
                                '--test_python .*: no such executable'):
      upstream.export(self.jax, self.out, TESTS_DIR, self.manifest,
                      test_python=os.path.join(self.root, 'no-python'))
    self.assertFalse(os.path.exists(self.out))
    self.assertLen(_git(['worktree', 'list'], self.jax).splitlines(), 1)

  def test_not_a_jax_checkout(self):
    with self.assertRaisesRegex(errors.EnvironmentProblem,
                                'not a jax checkout'):
      upstream.export(self.root, self.out, TESTS_DIR, self.manifest)



class BazelDepsTest(absltest.TestCase):
  """The deps of new imports, on the stand-in BUILD files and modules."""

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp(prefix='bazel-deps-test-')
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
    for path, text in _BUILD_FILES.items():
      self.write(path, text)
    for module in ('jax/__init__.py', 'jax/_src/source_info_util.py',
                   'jax/_src/pallas/mosaic/__init__.py',
                   'jax/_src/pallas/mosaic/sc_core.py',
                   'jax/_src/pallas/mosaic/sc_primitives.py',
                   'jax/_src/pallas/mosaic/interpret/__init__.py',
                   'jax/_src/pallas/mosaic/interpret/params.py',
                   'jax/_src/pallas/mosaic/interpret/shared_memory.py',
                   'jax/experimental/pallas/__init__.py',
                   'jax/experimental/pallas/tpu.py',
                   'jax/experimental/pallas/tpu_sc.py',
                   'tests/pallas/tpu_pallas_interpret_test.py'):
      self.write(module, '')

  def write(self, path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.join(self.root, path)), exist_ok=True)
    with open(os.path.join(self.root, path), 'w') as f:
      f.write(text)

  def update(self, path: str, before: str, after: str) -> list[str]:
    self.write(path, after)
    return bazel_deps.update_build_files(self.root, {path: before})

  def read(self, path: str) -> str:
    with open(os.path.join(self.root, path)) as f:
      return f.read()

  def test_library_gets_each_new_module_in_order(self):
    path = 'jax/_src/pallas/mosaic/interpret/params.py'
    self.assertEqual(self.update(path, 'import jax\n', textwrap.dedent('''\
        import jax
        import threading
        from jax._src import source_info_util
        from jax._src.pallas.mosaic import (sc_primitives,
                                            sc_core as core)
        from . import shared_memory
        def f[T](x: T) -> T:  # syntax newer than Python 3.10 parses
          import numpy as np
          return np.asarray(x)
        ''')), ['jax/_src/pallas/mosaic/interpret/BUILD'])
    self.assertIn(
        '    name = "params",\n'
        '    srcs = ["params.py"],\n'
        '    deps = [\n'
        '        ":shared_memory",\n'
        '        ":utils",\n'
        '        "//jax",\n'
        '        "//jax/_src:source_info_util",\n'
        '        "//jax/_src/pallas/mosaic:sc_core",\n'
        '        "//jax/_src/pallas/mosaic:sc_primitives",\n'
        '    ] + py_deps("numpy"),\n',
        self.read('jax/_src/pallas/mosaic/interpret/BUILD'))

  def test_nothing_new_changes_nothing(self):
    path = 'jax/_src/pallas/mosaic/interpret/shared_memory.py'
    # Already listed, the package __init__ of `from a import b`, or moved.
    self.assertEqual(self.update(
        path, 'import os\nfrom jax._src.pallas.mosaic.interpret import params\n',
        'from jax._src import source_info_util\n'
        'from jax._src.pallas.mosaic.interpret import params as p\n'), [])
    self.assertEqual(self.read('jax/_src/pallas/mosaic/interpret/BUILD'),
                     _BUILD_FILES['jax/_src/pallas/mosaic/interpret/BUILD'])

  def test_new_module_gets_a_target_that_its_importers_get(self):
    # The commit adds tpu_numerics.py and makes params.py import it.
    module = 'jax/_src/pallas/mosaic/interpret/tpu_numerics.py'
    self.write(module, textwrap.dedent('''\
        import functools
        import numpy as np
        from jax._src import source_info_util
        from jax._src.pallas.mosaic.interpret import shared_memory
        '''))
    self.write('jax/_src/pallas/mosaic/interpret/params.py',
               'from . import tpu_numerics\n')
    # The new target type-checks as the file's others do.
    build = 'jax/_src/pallas/mosaic/interpret/BUILD'
    self.write(build, self.read(build).replace(
        '    srcs = ["params.py"],\n',
        '    srcs = ["params.py"],\n    type_checking = "pyrefly",\n'))
    self.assertEqual(bazel_deps.update_build_files(self.root, {
        module: None,
        'jax/_src/pallas/mosaic/interpret/params.py': '',
        # A module that a later commit adds: not there yet.
        'jax/_src/pallas/mosaic/interpret/later.py': None,
    }), ['jax/_src/pallas/mosaic/interpret/BUILD'])
    build = self.read(build)
    self.assertTrue(build.endswith(
        '''    ] + py_deps("numpy"),\n)\n\n'''
        'pytype_strict_library(\n'
        '    name = "tpu_numerics",\n'
        '    srcs = ["tpu_numerics.py"],\n'
        '    type_checking = "pyrefly",\n'
        '    deps = [\n'
        '        ":shared_memory",\n'
        '        "//jax/_src:source_info_util",\n'
        '    ] + py_deps("numpy"),\n'
        ')\n'), build)
    self.assertIn('    deps = [\n'
                  '        ":tpu_numerics",\n'
                  '        ":utils",\n', build)
    self.assertNotIn('later', build)
    # A new module in a folder without a BUILD file of its own stops it.
    os.makedirs(os.path.join(self.root, 'jax/_src/pallas/mosaic/interpret/x'))
    self.write('jax/_src/pallas/mosaic/interpret/x/y.py', 'import jax\n')
    with self.assertRaisesRegex(errors.PatchDataError, 'no BUILD file of its'):
      bazel_deps.update_build_files(
          self.root, {'jax/_src/pallas/mosaic/interpret/x/y.py': None})

  def test_test_gets_public_targets_only(self):
    path = 'tests/pallas/tpu_pallas_interpret_test.py'
    # tpu_sc.py is in the glob of :pallas too; the target that names it wins.
    self.assertEqual(self.update(path, '', textwrap.dedent('''\
        import jax
        from jax._src.pallas.mosaic import sc_core
        from jax.experimental.pallas import tpu_sc as plsc
        ''')), ['tests/pallas/BUILD'])
    self.assertIn('        "//jax/experimental:pallas_tpu",\n'
                  '        "//jax/experimental:pallas_tpu_sc",\n    ] + ',
                  self.read('tests/pallas/BUILD'))
    self.assertNotIn('sc_core', self.read('tests/pallas/BUILD'))

  def test_what_it_cannot_do_stops_the_export(self):
    path = 'jax/_src/pallas/mosaic/interpret/thread_map.py'
    with self.assertRaisesRegex(errors.PatchDataError,
                                'imports portpicker, which .* by hand'):
      self.update(path, '', 'import portpicker\n')
    path = 'jax/_src/pallas/mosaic/interpret/vector_clock.py'
    with self.assertRaisesRegex(errors.PatchDataError,
                                'No target .* has vector_clock.py'):
      self.update(path, '', 'import jax\n')
    self.write('jax/_src/pallas/mosaic/interpret/BUILD', textwrap.dedent('''\
        pytype_strict_library(
            name = "thread_map",
            srcs = ["thread_map.py"],
            deps = py_deps("numpy"),
        )
        '''))
    with self.assertRaisesRegex(errors.PatchDataError, 'by hand'):
      self.update('jax/_src/pallas/mosaic/interpret/thread_map.py', '',
                  'from jax._src import source_info_util\n')
    os.remove(os.path.join(self.root, 'tests/pallas/BUILD'))
    os.remove(os.path.join(self.root, 'tests/BUILD'))
    with self.assertRaisesRegex(errors.PatchDataError, 'No BUILD file'):
      self.update('tests/pallas/tpu_pallas_interpret_test.py', '',
                  'from jax.experimental.pallas import tpu_sc\n')


class MergePatchTest(absltest.TestCase):
  """The three-way rebase of a patch that adds or removes a module."""

  def test_added_and_removed_modules(self):
    root = tempfile.mkdtemp(prefix='merge-patch-test-')
    self.addCleanup(shutil.rmtree, root, ignore_errors=True)
    patch = manifest_lib.Patch('0001-x.patch', '', '', (), 'x', {})
    with open(os.path.join(root, 'old.py'), 'w') as f:
      f.write('A = 1\n')
    upstream.merge_patch(root, {'new/m.py': None, 'old.py': 'A = 1\n'},
                         {'new/m.py': 'B = 2\n', 'old.py': None}, patch)
    with open(os.path.join(root, 'new', 'm.py')) as f:
      self.assertEqual(f.read(), 'B = 2\n')
    self.assertFalse(os.path.exists(os.path.join(root, 'old.py')))
    # A module the patch adds that the checkout has otherwise, or one it
    # removes that the checkout changed, is a conflict.
    for before, after in (({'new/m.py': None}, {'new/m.py': 'C = 3\n'}),
                          ({'new/m.py': 'C = 3\n'}, {'new/m.py': None})):
      with self.assertRaisesRegex(errors.ConflictError, 'is otherwise'):
        upstream.merge_patch(root, before, after, patch)
    with open(os.path.join(root, 'new', 'm.py')) as f:
      self.assertEqual(f.read(), 'B = 2\n')


class PytestRunsTest(absltest.TestCase):

  def test_counts_and_failures_come_from_pytest_output(self):
    run = pytest_runs.parse('cmd', 1, textwrap.dedent('''\
        ..F.s
        FAILED tests/pallas/a_test.py::T::test_x - AssertionError: 1 != 2
        ERROR tests/pallas/a_test.py::T::test_y - RuntimeError
        1 failed, 3 passed, 1 skipped, 2 deselected, 1 error in 12.5s
        '''))
    self.assertEqual(run.summary(), '3 passed, 1 failed, 1 errors, 1 skipped, '
                     '2 deselected')
    self.assertEqual(run.failures, {'tests/pallas/a_test.py::T::test_x',
                                    'tests/pallas/a_test.py::T::test_y'})
    earlier = pytest_runs.parse(
        'cmd', 1, 'FAILED tests/pallas/a_test.py::T::test_y - x\n'
        '1 failed, 4 passed in 1.0s\n')
    self.assertEqual(pytest_runs.new_failures(earlier, run),
                     '1: `tests/pallas/a_test.py::T::test_x`')
    self.assertEqual(pytest_runs.new_failures(run, earlier), '0')

  def test_a_run_without_counts_is_not_measured(self):
    for code, output in ((2, 'Interrupted: 1 error during collection\n'),
                         (-9, ''), (1, 'Fatal Python error: Aborted\n')):
      run = pytest_runs.parse('cmd', code, output)
      self.assertIsNone(run.counts)
      self.assertStartsWith(run.summary(), f'not measured (pytest exit code '
                            f'{code}')
      self.assertEqual(pytest_runs.new_failures(run, run), 'not known')
    tmp = tempfile.mkdtemp(prefix='pytest-runs-test-')
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    python = os.path.join(tmp, 'python')
    with open(python, 'w') as f:
      f.write('#!/bin/sh\nsleep 5\n')
    os.chmod(python, 0o755)
    run = pytest_runs.run(os.path.dirname(python), python, ('t.py',),
                          timeout=0.5)
    self.assertEqual(run.summary(), 'not measured (timed out after 0 s)')

if __name__ == '__main__':
  absltest.main()
