"""Export the series as a stack of single-commit upstream pull requests.

Upstream jax asks for one commit per pull request. Each patch of a series is
one change and one commit of the stack, in series order. For each patch, on
a scratch worktree of the given jax checkout (the checkout itself is never
touched), the export

1. applies the patch exactly (``git apply``, no fuzz), or, if no series
   applies exactly to the checkout, rebases it onto the checkout with a
   three-way merge (``git merge-file``) from the released files the series
   was made against; any conflict stops the export;
2. adds the test methods of the patch's test classes (``CHANGES``) to
   upstream's existing test classes: a test class of this repository's
   ``tests/pallas`` holds one patch's tests, and the export copies its
   methods' source (found with ``ast``) to the end of upstream's
   ``InterpretTest`` (``tpu_pallas_interpret_test.py``) or
   ``InterpretDistributedTest`` (``tpu_pallas_interpret_distributed_test.py``),
   without the code fenced for older releases (``for_jax_head``), adding
   the imports they need; a method that uses a name upstream's file lacks,
   or whose name upstream's class already has, stops the export;
3. adds to upstream's BUILD files the targets of the modules the commit
   newly imports (``bazel_deps``: upstream uses strict deps);
4. commits with the patch's message without its DEP-3 header, authored by
   the user's git identity, and writes it with ``git format-patch``, ready
   for ``git am --keep-non-patch`` (which keeps the ``[Pallas]`` tag), with a
   pull request description beside it (``NNNN-....md``).

Nothing is pushed or submitted: a person reviews and submits.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import zipfile

from absl import logging

from jax_fork import bazel_deps
from jax_fork import drift
from migration import errors
from migration import gitapply
from migration import manifest as manifest_lib
from jax_fork import pytest_runs
from migration import wheels

TEST_DIR = os.path.join('tests', 'pallas')
HELPER = 'tpu_interpret_test_util'
# Upstream's test files and classes that receive our tests: a file of ours
# named `*_distributed_test.py` goes to the distributed one.
UPSTREAM_TEST = (os.path.join(TEST_DIR, 'tpu_pallas_interpret_test.py'),
                 'InterpretTest')
UPSTREAM_DISTRIBUTED_TEST = (
    os.path.join(TEST_DIR, 'tpu_pallas_interpret_distributed_test.py'),
    'InterpretDistributedTest')
# The only paths an exported commit may touch: the interpreter, the PRNG
# primitives (0042), the lowering of jitted functions (0044) and the BUILD
# file of their targets. No changelog:
# upstream's interpreter commits add none, and entries of stacked PRs would
# conflict.
ALLOWED_PATHS = ('jax/_src/pallas/mosaic/interpret/', 'jax/_src/random/prng.py',
                 'jax/_src/interpreters/mlir.py', 'jax/_src/BUILD',
                 'tests/pallas/')

# The tests also run on older jax releases. The code that only those need is
# fenced by these comment lines; inside a fence, a comment
# `# At jax HEAD: <code>` gives the code that replaces the fence.
OLDER_RELEASES_BEGIN = '# Older jax releases: begin.'
OLDER_RELEASES_END = '# Older jax releases: end.'
AT_HEAD = '# At jax HEAD: '
# Uses of the helper's shims for older releases, and their HEAD equivalents.
HEAD_EQUIVALENTS = {
    'test_util.kernel(': 'pl.kernel(',
    'test_util.reset_after_failure()':
        'pltpu.reset_tpu_interpret_mode_state()',
    'test_util.interpret_params(': 'pltpu.InterpretParams(',
    'test_util.tensorcore_mesh(': 'pltpu.TensorCoreMesh(',
    'test_util.tpu_v6e()': "jax.sharding.AbstractDevice('TPU v6e', 1, 'tpu')",
}
# Imports of our test files that upstream's files spell differently.
HEAD_IMPORTS = {
    'mosaic_interpret': 'from jax._src.pallas.mosaic.interpret import '
                        'interpret_pallas_call as mosaic_interpret',
}


@dataclasses.dataclass(frozen=True)
class TestClass:
  """A test class of this repository's ``tests/pallas``."""
  file: str
  name: str

  @property
  def upstream(self) -> tuple[str, str]:
    """Upstream's test file (relative to the checkout) and class."""
    return (UPSTREAM_DISTRIBUTED_TEST if '_distributed_' in self.file
            else UPSTREAM_TEST)


@dataclasses.dataclass(frozen=True)
class Change:
  """One pull request: a patch of the series and its tests.

  ``notes`` (Markdown) go to the pull request description, after what the
  commit message says.

  ``prefix`` is the patch's number in the newest series. A change that a
  jax release newer than upstream HEAD has upstream (its own implementation)
  is a backport: its patch, whose DEP-3 ``Applied-Upstream`` names that
  release (``manifest.Patch.applied_upstream``), is in the series for older
  releases only. It has no ``prefix`` (its number differs from series to
  series) and gives its ``subject``, as the newest series has no patch to
  take it from. Its tests also run on the releases that have it upstream.

  ``max_changed_lines``: the size of the commit that the stack's shape test
  allows (700 lines, what one review takes), with the reason when larger.
  """
  prefix: str | None
  tests: tuple[TestClass, ...]
  notes: str = ''
  subject: str | None = None
  max_changed_lines: tuple[int, str] = (700, '')


_SEMAPHORE = 'tpu_pallas_interpret_semaphore_test.py'
_COLLECTIVE = 'tpu_pallas_interpret_collective_test.py'
_DEADLOCK = 'tpu_pallas_interpret_deadlock_test.py'
_SPARSECORE = 'tpu_pallas_interpret_sparsecore_test.py'
_PRNG = 'tpu_pallas_interpret_prng_test.py'
_DEBUG_CHECK = 'tpu_pallas_interpret_debug_check_test.py'
_MEMORY_SPACE = 'tpu_pallas_interpret_memory_space_test.py'
_SEMAPHORE_OUTPUT = 'tpu_pallas_interpret_semaphore_output_test.py'
_REF_VIEW = 'tpu_pallas_interpret_ref_view_test.py'
_CAPTURED_SCALAR = 'tpu_pallas_interpret_captured_scalar_test.py'
_BLOCK_COPY = 'tpu_pallas_interpret_block_copy_test.py'
_PRNG_KEY = 'tpu_pallas_interpret_prng_key_test.py'
_MXU = 'tpu_pallas_interpret_mxu_test.py'
_KERNEL_EFFECTS = 'tpu_pallas_interpret_kernel_effects_test.py'
_SPARSECORE_VECTOR = 'tpu_pallas_interpret_sparsecore_vector_test.py'
_STEP_COPY = 'tpu_pallas_interpret_step_copy_test.py'
_SELECT_REF = 'tpu_pallas_interpret_select_ref_test.py'
_SPARSECORE_PACK = 'tpu_pallas_interpret_sparsecore_pack_test.py'
_STEP_END_COPY = 'tpu_pallas_interpret_step_end_copy_test.py'
_EMPTY_REF = 'tpu_pallas_interpret_empty_ref_test.py'
_EMIT_PIPELINE_PRIMITIVE = (
    'tpu_pallas_interpret_emit_pipeline_primitive_test.py')
_SPARSECORE_GATHER = 'tpu_pallas_interpret_sparsecore_gather_test.py'
_SPARSECORE_LOWERING = 'tpu_pallas_interpret_sparsecore_lowering_test.py'
_CORE_MEMORY_SPACE = 'tpu_pallas_interpret_core_memory_space_test.py'
_SPARSECORE_SCAN_COUNT = 'tpu_pallas_interpret_sparsecore_scan_count_test.py'
_POISON_BUFFERS = 'tpu_pallas_interpret_poison_buffers_test.py'
_CALLBACK_ARGS = 'tpu_pallas_interpret_callback_args_test.py'
_TRANSFORMS_TO_INTS = 'tpu_pallas_interpret_transforms_to_ints_test.py'
_IN_PLACE_REF = 'tpu_pallas_interpret_in_place_ref_test.py'
_PACK_ELEMENTWISE = 'tpu_pallas_interpret_pack_elementwise_test.py'
_REGULAR_SEMAPHORE_DMA = (
    'tpu_pallas_interpret_regular_semaphore_dma_test.py')
_SIMULATED_TPU = 'tpu_pallas_interpret_simulated_tpu_test.py'
_MANUAL_AXES = 'tpu_pallas_interpret_manual_axes_distributed_test.py'
_MASKED_STORE = 'tpu_pallas_interpret_masked_store_test.py'
_STOCHASTIC_ROUND = 'tpu_pallas_interpret_stochastic_round_test.py'
_UNSIGNED_MATMUL = 'tpu_pallas_interpret_unsigned_matmul_test.py'
_NARROW_MASKED_STORE = 'tpu_pallas_interpret_narrow_masked_store_test.py'
_DISABLE_BOUNDS_CHECKS = (
    'tpu_pallas_interpret_disable_bounds_checks_test.py')
_RANDOM_IMPL = 'tpu_pallas_interpret_random_impl_test.py'
_CORE_DEVICE_ID = 'tpu_pallas_interpret_core_device_id_test.py'
_DYNAMIC_GRID = 'tpu_pallas_interpret_dynamic_grid_test.py'
_SPARSECORE_BITCAST = 'tpu_pallas_interpret_sparsecore_bitcast_test.py'
_PRNG_UNSUPPORTED = 'tpu_pallas_interpret_prng_unsupported_test.py'
_HOST_DMA = 'tpu_pallas_interpret_host_dma_test.py'
_REVISIT_ANY = 'tpu_pallas_interpret_revisit_test.py'
_DMA_SEMAPHORE_COUNT = 'tpu_pallas_interpret_dma_semaphore_count_test.py'
_MATMUL_PRECISION = 'tpu_pallas_interpret_matmul_precision_test.py'
_ERROR_LOCATION = 'tpu_pallas_interpret_error_location_test.py'
_DMA_RACE = 'tpu_pallas_interpret_dma_race_test.py'
_NONZERO_SEMAPHORE = 'tpu_pallas_interpret_nonzero_semaphore_test.py'
_VMEM_LIMIT = 'tpu_pallas_interpret_vmem_limit_test.py'


def _tests(file: str, name: str,
           distributed: str | None = None) -> tuple[TestClass, ...]:
  """Returns the test classes of one change.

  Args:
    file: a test file of ``tests/pallas``.
    name: its test class.
    distributed: a test class of its twin ``*_distributed_test.py``, if any.
  """
  tests = (TestClass(file, name),)
  if distributed:
    tests += (TestClass(file.replace('_test.py', '_distributed_test.py'),
                        distributed),)
  return tests


CHANGES = (
    Change(
        prefix='0001',
        tests=_tests(_SEMAPHORE, 'InterpretLocalSignalTest'),
    ),
    Change(
        prefix='0002',
        tests=_tests(_SEMAPHORE, 'InterpretSemaphoreReadTest'),
    ),
    Change(
        prefix='0003',
        tests=_tests(_SEMAPHORE, 'InterpretNonDecrementingWaitTest',
                     'InterpretSemaphoreDistributedTest'),
    ),
    Change(
        prefix='0004',
        tests=_tests(_COLLECTIVE, 'InterpretCollectiveRunScopedTest',
                     'InterpretCollectiveRunScopedDistributedTest'),
    ),
    Change(
        prefix='0005',
        tests=_tests(_COLLECTIVE, 'InterpretCollectiveRunScopedMisuseTest'),
    ),
    Change(
        prefix='0006',
        tests=_tests(_DEADLOCK, 'InterpretDeadlockTest',
                     'InterpretDeadlockDistributedTest'),
        notes=(
            'Deadlock detection is on by default (`detect_deadlocks=True`): '
            'a kernel that deadlocks now fails with a `JaxRuntimeError` '
            'naming a `DeadlockError` instead of hanging, which changes '
            'what existing kernels do; `detect_deadlocks=False` keeps the '
            'hang. A core that polls `pl.semaphore_read` in a loop never '
            'blocks and is not detected. '
            'The cost of deadlock detection, '
            'measured as CPU time per call with '
            'detection on over off (the same io_callbacks run either way), '
            'was 0.989, 1.016 and 1.027 for a '
            'kernel of 8 devices x 4 cores whose every core blocks in a wait '
            'each round, and 0.994, 1.001 and 0.996 for a 2-core ping-pong '
            'kernel, in three runs of `python benchmarks/run.py` of the patch '
            "series' repository on 2026-12-01 (2-core machine; a 1% "
            'difference is within what it can tell).'),
    ),
    Change(
        prefix='0007',
        tests=_tests(_SPARSECORE, 'InterpretSparseCoreTest'),
        # The review of 2026-12-05 asks to split it (issue 43): the
        # collective scopes over the subcore axis as a change of their own.
        max_changed_lines=(760, 'the fix of its collective allocation '
                                'records, until the split'),
    ),
    Change(
        prefix='0008',
        tests=_tests(_SPARSECORE, 'InterpretSparseCoreLoadStoreTest'),
    ),
    Change(
        prefix='0009',
        tests=_tests(_PRNG, 'InterpretPrngTest'),
    ),
    Change(
        prefix='0010',
        tests=_tests(_DEBUG_CHECK, 'InterpretDebugCheckTest'),
    ),
    Change(
        prefix='0011',
        tests=_tests(_MEMORY_SPACE, 'InterpretMemorySpaceConstraintTest'),
    ),
    Change(
        prefix='0012',
        tests=_tests(_SEMAPHORE_OUTPUT, 'InterpretSemaphoreOutputTest'),
    ),
    Change(
        prefix='0013',
        tests=_tests(_REF_VIEW, 'InterpretRefViewTest'),
    ),
    Change(
        prefix='0014',
        tests=_tests(_CAPTURED_SCALAR, 'InterpretCapturedScalarTest'),
    ),
    Change(
        prefix='0015',
        tests=_tests(_BLOCK_COPY, 'InterpretBlockCopyTest'),
    ),
    Change(
        prefix='0016',
        tests=_tests(_PRNG_KEY, 'InterpretPrngKeyTest'),
    ),
    Change(
        prefix='0017',
        tests=_tests(_MXU, 'InterpretExplicitMXUTest'),
    ),
    Change(
        prefix='0018',
        tests=_tests(_KERNEL_EFFECTS, 'InterpretSparseCoreRefEffectsTest'),
    ),
    Change(
        prefix='0019',
        tests=_tests(_SPARSECORE_VECTOR, 'InterpretSparseCoreVectorTest'),
    ),
    Change(
        prefix='0020',
        tests=_tests(_STEP_COPY, 'InterpretStepCopyTest'),
    ),
    Change(
        prefix='0021',
        tests=_tests(_SELECT_REF, 'InterpretSelectRefTest',
                     'InterpretSelectRefDistributedTest'),
    ),
    Change(
        prefix='0022',
        tests=_tests(_SPARSECORE_PACK, 'InterpretSparseCorePackTest'),
    ),
    Change(
        prefix='0023',
        tests=_tests(_STEP_END_COPY, 'InterpretStepEndCopyTest'),
    ),
    Change(
        prefix='0024',
        tests=_tests(_EMPTY_REF, 'InterpretEmptyRefTest'),
    ),
    Change(
        prefix='0025',
        tests=_tests(_EMIT_PIPELINE_PRIMITIVE,
                     'InterpretEmitPipelinePrimitiveTest'),
    ),
    Change(
        prefix='0026',
        tests=_tests(_SPARSECORE_GATHER, 'InterpretSparseCoreGatherTest'),
    ),
    Change(
        prefix='0027',
        tests=_tests(_SPARSECORE_LOWERING, 'InterpretSparseCoreLoweringTest'),
    ),
    Change(
        prefix='0028',
        tests=_tests(_CORE_MEMORY_SPACE, 'InterpretCoreMemorySpaceTest'),
    ),
    Change(
        prefix='0029',
        tests=_tests(_SPARSECORE_SCAN_COUNT,
                     'InterpretSparseCoreScanCountTest'),
    ),
    Change(
        prefix='0030',
        tests=_tests(_POISON_BUFFERS, 'InterpretPoisonBuffersTest'),
    ),
    Change(
        prefix='0031',
        tests=_tests(_CALLBACK_ARGS, 'InterpretCallbackArgsTest'),
    ),
    Change(
        prefix='0032',
        tests=_tests(_TRANSFORMS_TO_INTS, 'InterpretTransformsToIntsTest'),
    ),
    Change(
        prefix='0033',
        tests=_tests(_IN_PLACE_REF, 'InterpretInPlaceRefTest'),
    ),
    Change(
        prefix='0034',
        tests=_tests(_PACK_ELEMENTWISE, 'InterpretPackElementwiseTest'),
    ),
    Change(
        prefix='0035',
        tests=_tests(_REGULAR_SEMAPHORE_DMA,
                     'InterpretRegularSemaphoreDmaTest'),
    ),
    Change(
        prefix='0036',
        tests=_tests(_SIMULATED_TPU, 'InterpretSimulatedTpuTest'),
    ),
    Change(
        prefix='0037',
        tests=(TestClass(_MANUAL_AXES, 'InterpretManualAxesDistributedTest'),),
    ),
    Change(
        prefix='0038',
        tests=_tests(_MASKED_STORE, 'InterpretMaskedStoreTest'),
    ),
    Change(
        prefix='0039',
        tests=_tests(_STOCHASTIC_ROUND, 'InterpretStochasticRoundTest'),
    ),
    Change(
        prefix='0040',
        tests=(_tests(_UNSIGNED_MATMUL, 'InterpretUnsignedMatmulTest')
               + _tests(_NARROW_MASKED_STORE,
                        'InterpretNarrowMaskedStoreTest')),
    ),
    Change(
        prefix='0041',
        tests=_tests(_DISABLE_BOUNDS_CHECKS,
                     'InterpretDisableBoundsChecksTest'),
    ),
    Change(
        prefix='0042',
        tests=_tests(_RANDOM_IMPL, 'InterpretRandomImplTest'),
    ),
    Change(
        prefix='0043',
        tests=_tests(_DYNAMIC_GRID, 'InterpretDynamicGridTest'),
    ),
    Change(
        prefix='0044',
        tests=_tests(_HOST_DMA, 'InterpretHostDmaTest'),
    ),
    Change(
        prefix='0045',
        tests=_tests(_REVISIT_ANY, 'InterpretRevisitAnyTest'),
    ),
    Change(
        prefix='0046',
        tests=_tests(_DMA_SEMAPHORE_COUNT, 'InterpretDmaSemaphoreCountTest'),
    ),
    Change(
        prefix='0047',
        tests=_tests(_MATMUL_PRECISION, 'InterpretMatmulPrecisionTest'),
    ),
    Change(
        prefix='0048',
        tests=_tests(_ERROR_LOCATION, 'InterpretErrorLocationTest'),
    ),
    Change(
        prefix='0049',
        tests=_tests(_DMA_RACE, 'InterpretDmaRaceTest'),
    ),
    Change(
        prefix='0050',
        tests=_tests(_NONZERO_SEMAPHORE, 'InterpretNonzeroSemaphoreTest'),
    ),
    Change(
        prefix='0051',
        tests=_tests(_VMEM_LIMIT, 'InterpretVmemLimitTest'),
    ),
    Change(
        prefix=None,
        tests=_tests(_CORE_DEVICE_ID, 'InterpretCoreDeviceIdTest'),
        subject=('[Pallas] In TPU Interpret Mode, route a `device_id` that '
                 'names a core axis to that core.'),
        notes=('jax 0.12.0 has this behaviour upstream, in its own '
               'implementation (`core_axis_names` in '
               '`interpret_utils._device_id_to_logical`), which this '
               "checkout's interpreter predates: drop this commit where the "
               'branch already has it. The tests pass with jax 0.12.0.1 as '
               'released.'),
    ),
    Change(
        prefix=None,
        tests=_tests(_SPARSECORE_BITCAST, 'InterpretSparseCoreBitcastTest'),
        subject='[Pallas] In TPU Interpret Mode, run SparseCore `plsc.bitcast`.',
        notes=('In jax 0.12.0, `plsc.bitcast` is `pltpu.bitcast(x, dtype, '
               'dim=-1)`, which TPU interpret mode runs, and `bitcast_p` of '
               '`sc_primitives` is gone: drop this commit where the branch '
               'has that. The tests pass with jax 0.12.0.1 as released.'),
    ),
    Change(
        prefix=None,
        tests=_tests(_PRNG_UNSUPPORTED, 'InterpretPrngUnsupportedTest'),
        subject=('[Pallas] In TPU Interpret Mode, raise NotImplementedError '
                 'for `pltpu.prng_random_bits`.'),
        notes=('Only the series for jax 0.10 has this patch: there the '
               'interpreter returned zeros, and patch 0009, which draws '
               'bits, does not carry (0.10 does not order its callbacks). '
               'Not for upstream, whose interpreter is newer.'),
    ),
)


def changes_by_subject(manifest: manifest_lib.Manifest) -> dict[str, Change]:
  """Returns the ``CHANGES`` entry of each patch subject of the series.

  A patch of the newest series is matched by its number (``prefix``), and so
  is, by subject, the patch of every other series that drift compares with
  it; a backport by its ``subject``.

  Raises:
    PatchDataError: the newest series' patch prefixes are not those of the
      ``CHANGES`` that are not backports, in order.
  """
  newest = drift.newest_series(manifest)
  own = [c for c in CHANGES if c.prefix is not None]
  prefixes = [p.name[:4] for p in newest.patches]
  if prefixes != [c.prefix for c in own]:
    raise errors.PatchDataError(
        f'{newest.name} has patches {", ".join(prefixes)}; CHANGES knows '
        f'{", ".join(str(c.prefix) for c in own)}: update CHANGES.')
  by_subject = {p.subject: c for p, c in zip(newest.patches, own)}
  for c in CHANGES:
    if c.prefix is None:
      assert c.subject is not None
      by_subject[c.subject] = c
  return by_subject


def _change_of(by_subject: dict[str, Change], series: manifest_lib.Series,
               patch: manifest_lib.Patch) -> Change:
  if patch.subject not in by_subject:
    raise errors.PatchDataError(
        f'{series.name}: {patch.name} has a subject that neither the newest '
        f'series nor a backport of CHANGES has: {patch.subject!r}.')
  return by_subject[patch.subject]


def carried_test_files(manifest: manifest_lib.Manifest,
                       series: manifest_lib.Series) -> frozenset[str]:
  """Returns the ``tests/pallas`` files of the changes ``series`` carries.

  A test file fences its tests on the jax release: on a release whose series
  lacks the file's change, every test of the file skips. The test runner
  (``scripts/run_tests.py``) runs only these files there.

  Args:
    manifest: the loaded manifest.
    series: one of its series.

  Returns:
    The file names (without folder) of the test classes of the change of
    each patch of ``series`` (``changes_by_subject``), and of each backport
    that the releases ``series`` serves have upstream.

  Raises:
    PatchDataError: see ``changes_by_subject``; or ``series`` has a patch
      whose subject neither the newest series nor a backport has.
  """
  by_subject = changes_by_subject(manifest)
  files = set()
  for patch in series.patches:
    files.update(t.file for t in _change_of(by_subject, series, patch).tests)
  # Backports that the releases of `series` have upstream.
  oldest = manifest_lib.version_key(series.name[len('jax-'):])
  for s in manifest.series.values():
    for patch in s.patches:
      if patch.applied_upstream is not None and (
          oldest >= manifest_lib.version_key(patch.applied_upstream)):
        files.update(
            t.file for t in _change_of(by_subject, s, patch).tests)
  return frozenset(files)


def _git(args: list[str], cwd: str) -> str:
  proc = subprocess.run([gitapply.git_executable(), *args], cwd=cwd,
                        capture_output=True, text=True, check=False)
  if proc.returncode:
    raise errors.EnvironmentProblem(
        f'git {" ".join(args)} failed in {cwd}:\n{proc.stderr.strip()}')
  return proc.stdout


def checkout_version(jax_repo: str) -> str | None:
  """Returns the jax version of a checkout, from ``jax/version.py``."""
  try:
    with open(os.path.join(jax_repo, 'jax', 'version.py'),
              encoding='utf-8') as f:
      match = re.search(r'^_version\s*=\s*"([^"]+)"', f.read(), re.M)
  except OSError:
    return None
  return match.group(1) if match else None


def choose_series(manifest: manifest_lib.Manifest, jax_repo: str,
                  name: str | None = None) -> manifest_lib.Series:
  """Returns the series whose patches all apply exactly to the checkout.

  Args:
    manifest: the loaded manifest.
    jax_repo: the upstream jax checkout.
    name: a series name to use instead of choosing one.

  Raises:
    UsageError: ``name`` is not a series of the manifest.
    ConflictError: no series applies exactly; names, per series, the first
      patch that does not apply and git's message.
  """
  if name is not None:
    if name not in manifest.series:
      raise errors.UsageError(
          f'Unknown series {name}; known: {", ".join(manifest.series)}.')
    candidates = [manifest.series[name]]
  else:
    version = checkout_version(jax_repo)
    served = manifest.series_for(version) if version else None
    candidates = ([served] if served else []) + [
        s for s in manifest.series.values() if s is not served]
  problems = []
  for series in candidates:
    with tempfile.TemporaryDirectory(prefix='export-check-') as tmp:
      for f in series.files:
        src = os.path.join(jax_repo, f)
        if os.path.exists(src):
          os.makedirs(os.path.dirname(os.path.join(tmp, f)), exist_ok=True)
          shutil.copyfile(src, os.path.join(tmp, f))
      for patch in series.patches:
        ok, output = gitapply.try_apply(patch.path, tmp, check_only=False)
        if not ok:
          problems.append(f'{series.name}: {patch.name} does not apply:\n'
                          f'{output}')
          break
      else:
        return series
  raise errors.ConflictError(
      f'No series applies exactly to {jax_repo} (jax '
      f'{checkout_version(jax_repo)}); rebase the series onto it first.\n'
      + '\n'.join(problems))


def nearest_series(manifest: manifest_lib.Manifest,
                   version: str | None) -> manifest_lib.Series:
  """Returns the series made against the release nearest to `version`.

  That is the series serving the oldest release at or after `version` (a
  development checkout precedes its release), else the newest series.
  """
  def newest(s: manifest_lib.Series) -> tuple:
    return max(manifest_lib.version_key(v) for v in s.hashes)

  if version is not None:
    key = manifest_lib.version_key(version)
    later = [s for s in manifest.series.values() if newest(s) >= key]
    if later:
      return min(later, key=newest)
  return max(manifest.series.values(), key=newest)


def patch_states(series: manifest_lib.Series,
                 wheel_dirs: tuple[str, ...] = ()) -> list[dict[str, str]]:
  """Returns the touched files before the first patch and after each one.

  The files come from the released wheel of the newest version the series
  serves, with the series applied patch by patch.

  Args:
    series: the series.
    wheel_dirs: directories searched for the wheel before the cache.

  Returns:
    ``states[0]`` is the released files, ``states[k]`` the files after the
    first ``k`` patches; each maps a path to its text.

  Raises:
    PatchDataError: the series does not apply to its own release.
  """
  version = max(series.hashes, key=manifest_lib.version_key)
  wheel = wheels.pristine_wheel(version, wheel_dirs)
  with tempfile.TemporaryDirectory(prefix='export-states-') as tmp:
    with zipfile.ZipFile(wheel) as zf:
      for f in series.files:
        zf.extract(f, tmp)

    def snapshot() -> dict[str, str]:
      out = {}
      for f in series.files:
        with open(os.path.join(tmp, f), encoding='utf-8') as fh:
          out[f] = fh.read()
      return out

    states = [snapshot()]
    for patch in series.patches:
      ok, output = gitapply.try_apply(patch.path, tmp, check_only=False)
      if not ok:
        raise errors.PatchDataError(
            f'{patch.name} does not apply to jax {version}:\n{output}')
      states.append(snapshot())
  return states


def merge_patch(worktree: str, before: dict[str, str],
                after: dict[str, str], patch: manifest_lib.Patch) -> None:
  """Rebases one patch onto the worktree with ``git merge-file``.

  Raises:
    ConflictError: a file does not merge cleanly; names the patch and file.
  """
  with tempfile.TemporaryDirectory(prefix='export-merge-') as tmp:
    for f in after:
      if before[f] == after[f]:
        continue
      paths = {}
      for name, text in (('base', before[f]), ('theirs', after[f])):
        paths[name] = os.path.join(tmp, name)
        with open(paths[name], 'w', encoding='utf-8') as fh:
          fh.write(text)
      proc = subprocess.run(
          [gitapply.git_executable(), 'merge-file', '-p', '-q',
           os.path.join(worktree, f), paths['base'], paths['theirs']],
          capture_output=True, text=True, check=False)
      if proc.returncode:
        raise errors.ConflictError(
            f'{patch.name}: {f} does not merge cleanly onto the '
            f'checkout ({proc.returncode} conflict(s)); rebase the series '
            'onto it by hand (python -m jax_fork fork).')
      with open(os.path.join(worktree, f), 'w', encoding='utf-8') as fh:
        fh.write(proc.stdout)


def for_jax_head(source: str) -> str:
  """Returns a test or helper source without its code for older releases.

  Each fence from ``OLDER_RELEASES_BEGIN`` to ``OLDER_RELEASES_END`` is
  replaced by its ``# At jax HEAD: <code>`` lines as code, at their
  indentation, and the uses of shims in ``HEAD_EQUIVALENTS`` by their HEAD
  equivalents.

  Raises:
    PatchDataError: a fence is not closed.
  """
  out = []
  fenced = False
  for line in source.splitlines(keepends=True):
    stripped = line.strip()
    if stripped == OLDER_RELEASES_BEGIN:
      fenced = True
    elif stripped == OLDER_RELEASES_END:
      fenced = False
    elif not fenced:
      out.append(line)
    elif stripped.startswith(AT_HEAD):
      indent = line[:len(line) - len(line.lstrip())]
      out.append(indent + stripped[len(AT_HEAD):] + '\n')
  if fenced:
    raise errors.PatchDataError(
        f'{OLDER_RELEASES_BEGIN!r} without {OLDER_RELEASES_END!r}.')
  text = ''.join(out)
  for shim, head in HEAD_EQUIVALENTS.items():
    text = text.replace(shim, head)
  return text




def extract_methods(source: str, class_name: str) -> list[tuple[str, str]]:
  """Returns the methods of a test class as upstream gets them.

  Every method but ``setUp``/``tearDown`` (and their class forms), with its
  decorators and the comment lines right above it, without the code fenced
  for older releases (``for_jax_head``).

  Args:
    source: a test file of this repository.
    class_name: the class in it.

  Returns:
    ``(name, text)`` per method, in the file's order; ``text`` ends with a
    newline and is indented as a method.

  Raises:
    PatchDataError: the file has no such class, or it has no test method.
  """
  tree = ast.parse(source)
  classes = [n for n in tree.body
             if isinstance(n, ast.ClassDef) and n.name == class_name]
  if not classes:
    raise errors.PatchDataError(f'No test class {class_name}.')
  lines = source.splitlines(keepends=True)
  methods = []
  for node in classes[0].body:
    if not isinstance(node, ast.FunctionDef) or node.name in (
        'setUp', 'tearDown', 'setUpClass', 'tearDownClass'):
      continue
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    while start > 0 and lines[start - 1].strip().startswith('#'):
      start -= 1
    methods.append((node.name,
                    for_jax_head(''.join(lines[start:node.end_lineno]))))
  if not any(name.startswith('test') for name, _ in methods):
    raise errors.PatchDataError(f'{class_name} has no test method.')
  return methods


def free_names(method: str) -> set[str]:
  """Returns the names a method uses but neither binds nor gets as builtins."""
  tree = ast.parse(textwrap.dedent(method))
  loaded, bound = set(), set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Name):
      (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    elif isinstance(node, ast.arg):
      bound.add(node.arg)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                           ast.ClassDef)):
      bound.add(node.name)
    elif isinstance(node, ast.ExceptHandler) and node.name:
      bound.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      bound.update((a.asname or a.name).split('.')[0] for a in node.names)
  return loaded - bound - set(dir(builtins)) - {'__file__', '__name__'}


def module_names(source: str) -> set[str]:
  """Returns the names a module defines or imports at its top level."""
  names = set()
  for node in ast.parse(source).body:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      names.update((a.asname or a.name).split('.')[0] for a in node.names)
    elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      for target in targets:
        names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
  return names


def import_lines(source: str) -> dict[str, str]:
  """Returns, per name a test file imports, the import that binds it.

  The helper module is left out; ``HEAD_IMPORTS`` replace what our files
  get from it.
  """
  lines = {}
  for node in ast.parse(source).body:
    for alias in getattr(node, 'names', ()) if isinstance(
        node, (ast.Import, ast.ImportFrom)) else ():
      suffix = f' as {alias.asname}' if alias.asname else ''
      if isinstance(node, ast.Import):
        line = f'import {alias.name}{suffix}'
      else:
        line = f'from {node.module} import {alias.name}{suffix}'
      if HELPER not in line:
        lines[(alias.asname or alias.name).split('.')[0]] = line
  lines.update(HEAD_IMPORTS)
  return lines


def side_effect_imports(source: str) -> list[str]:
  """Returns the import lines of a test file whose names it never uses.

  Such an import is there for its side effect (e.g. ``threefry`` registers
  the ``pallas_threefry2x32`` PRNG implementation), which the methods taken
  from the file need as much as the names they use. The lines keep the
  ``# noqa: F401`` that tells linters so.
  """
  loaded = {n.id for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Name)}
  return [f'{line}  # noqa: F401'
          for name, line in import_lines(source).items()
          if name not in loaded and name not in HEAD_IMPORTS]


def _import_key(line: str) -> str:
  return line.split()[1]


def _is_third_party(line: str) -> bool:
  return _import_key(line).split('.')[0] in ('absl', 'jax', 'numpy')


def add_import(source: str, line: str) -> str:
  """Returns a test file with an import added to its sorted import block.

  Standard-library imports go to the first block, the others to the block of
  ``absl``/``jax``/``numpy`` imports, each at its place by module name, as
  upstream sorts them.
  """
  tree = ast.parse(source)
  imports = [n for n in tree.body
             if isinstance(n, (ast.Import, ast.ImportFrom))]
  lines = source.splitlines(keepends=True)
  third_party = _is_third_party(line)
  block = [n for n in imports
           if _is_third_party(ast.get_source_segment(source, n)) == third_party]
  if not block:
    # A first standard-library import: its own block before the others.
    first = imports[0].lineno - 1
    lines[first:first] = [line + '\n', '\n']
    return ''.join(lines)
  for node in block:
    if _import_key(ast.get_source_segment(source, node)) > _import_key(line):
      position = node.lineno - 1
      break
  else:
    position = block[-1].end_lineno
  lines[position:position] = [line + '\n']
  return ''.join(lines)


def add_tests(upstream_source: str, class_name: str,
              methods: list[tuple[str, str]],
              imports: dict[str, str],
              side_effects: list[str] | tuple[str, ...] = ()) -> str:
  """Returns upstream's test file with methods added to the end of a class.

  Args:
    upstream_source: upstream's test file.
    class_name: its class that gets the methods.
    methods: ``(name, text)`` of each method (``extract_methods``).
    imports: the import lines of our test file (``import_lines``).
    side_effects: the lines of our test file's imports made for their side
      effects (``side_effect_imports``); each that upstream's file lacks is
      added.

  Raises:
    PatchDataError: upstream's class is missing or already has a method of
      that name, or a method uses a name that neither upstream's file nor an
      import of our file provides.
  """
  tree = ast.parse(upstream_source)
  classes = [n for n in tree.body
             if isinstance(n, ast.ClassDef) and n.name == class_name]
  if not classes:
    raise errors.PatchDataError(f'Upstream has no test class {class_name}.')
  existing = {n.name for n in classes[0].body if isinstance(n, ast.FunctionDef)}
  clashes = sorted(existing & {name for name, _ in methods})
  if clashes:
    raise errors.PatchDataError(
        f'Upstream\'s {class_name} already has {", ".join(clashes)}; rename '
        'ours.')
  available = module_names(upstream_source)
  needed = set()
  for name, text in methods:
    missing = free_names(text) - available
    unknown = sorted(missing - set(imports))
    if unknown:
      raise errors.PatchDataError(
          f'{name} uses {", ".join(unknown)}, which upstream\'s test file '
          'lacks; use upstream\'s names (or fence the code for older '
          'releases).')
    needed |= missing
  lines = upstream_source.splitlines(keepends=True)
  end = classes[0].end_lineno
  lines[end:end] = ['\n' + text for _, text in methods]
  source = ''.join(lines)
  for name in sorted(needed):
    source = add_import(source, imports[name])
  for line in side_effects:
    if line.split('  #')[0] not in source:
      source = add_import(source, line)
  return source


DEP3_FIELDS = ('Description', 'Origin', 'Forwarded', 'Applied-Upstream',
               'Last-Update', 'Bug', 'Author', 'Reviewed-by')


def commit_message(patch: manifest_lib.Patch) -> str:
  """Returns a series patch's commit message without its DEP-3 header."""
  with open(patch.path, encoding='utf-8') as f:
    text = f.read()
  body = text.split('\n\n', 1)[1].split('\n---\n', 1)[0].strip()
  paragraphs = body.split('\n\n')
  dep3 = re.compile(rf'^({"|".join(DEP3_FIELDS)}): ')
  while paragraphs and all(dep3.match(l) or l.startswith(' ')
                           for l in paragraphs[-1].splitlines()):
    paragraphs.pop()
  return f'{patch.subject}\n\n' + '\n\n'.join(paragraphs) + '\n'


def run_linters(worktree: str, python: str,
                files: list[str]) -> list[tuple[str, str]]:
  """Runs ruff and pyrefly (if installed beside ``python``) on the files.

  Both read upstream's ``pyproject.toml``; pyrefly gets only the files under
  ``jax/``, as upstream's ``project-includes``.

  Returns:
    ``(command, result)`` per linter found.
  """
  results = []
  files = [f for f in files if f.endswith('.py')]
  bindir = os.path.dirname(python)
  # pyrefly checks what upstream's configuration includes: jax/, not tests.
  for tool, args, checked in (
      ('ruff', ['check'], files),
      ('pyrefly', ['check'], [f for f in files if f.startswith('jax/')])):
    exe = os.path.join(bindir, tool)
    if not os.path.exists(exe) or not checked:
      continue
    proc = subprocess.run([exe, *args, *checked], cwd=worktree,
                          capture_output=True, text=True, check=False)
    output = (proc.stdout + proc.stderr).strip().splitlines()
    results.append((f'{tool} {" ".join(args)} {" ".join(checked)}',
                    f'exit code {proc.returncode}'
                    + (f': {output[-1].strip()}' if output else '')))
  return results


def pr_description(message: str, number: int, total: int, stat: str,
                   tests: list[tuple[str, str, list[str]]],
                   change: Change, tested: list[str] | None) -> str:
  """Returns the pull request description of one exported commit.

  Args:
    message: the commit message.
    number: the commit's place in the stack (1-based).
    total: the number of commits in the stack.
    stat: ``git show --stat`` of the commit.
    tests: ``(file, class, method names)`` of the tests it adds.
    change: the change.
    tested: lines that say how it was tested, or None if not measured.
  """
  subject, _, body = message.partition('\n\n')
  depends = ('It applies on upstream main.' if number == 1 else
             f'It is stacked on PR {number - 1} of {total} of this series '
             '(send them in order).')
  added = ''.join(
      f'- `{cls}` in `{file}`: ' + ', '.join(f'`{m}`' for m in methods) + '\n'
      for file, cls, methods in tests)
  how = '\n'.join(tested) if tested else (
      'Not measured: this export ran without `--test_python`, so it claims '
      'no results. To measure, run in the checkout, with jaxlib of its '
      'version installed, without and with the first '
      f'{number} commit(s) of this stack (`git am --keep-non-patch`):\n\n'
      + ''.join(f'    {pytest_runs.command_line(args)}\n'
                for args in pytest_runs.TPU_COMMANDS)
      + '\nand the same for each other '
      f'`{pytest_runs.OTHER_PATTERN}` (the GPU interpreter\'s tests).')
  return (f'# {subject}\n\nPR {number} of {total}. {depends}\n\n'
          f'## What and why\n\n{body.strip()}\n\n'
          + (f'{change.notes}\n\n' if change.notes else '') +
          f'## Changes\n\n```\n{stat.strip(chr(10))}\n```\n\n'
          f'Tests added to existing classes:\n\n{added}\n'
          f'## How it was tested\n\n{how}\n')


def export(jax_repo: str, out_dir: str, tests_dir: str,
           manifest: manifest_lib.Manifest,
           series_name: str | None = None,
           test_python: str | None = None) -> list[str]:
  """Writes one ``git format-patch`` file per series patch, in order.

  Beside each patch file ``NNNN-<subject>.patch`` goes its pull request
  description ``NNNN-<subject>.md``.

  Args:
    jax_repo: an upstream jax git checkout; it is not modified.
    out_dir: where the patch files are written (created if missing).
    tests_dir: this repository's ``tests/pallas``.
    manifest: the loaded manifest.
    series_name: the series to export (default: the one that applies).
    test_python: a Python with jaxlib (and pytest) of the checkout's
      version, or None (the default) not to measure: if given, upstream's
      TPU interpreter tests (``pytest_runs.TPU_COMMANDS``) run before the
      first commit and after each, the other interpreter tests
      (``pytest_runs.OTHER_PATTERN``) before the first and after the last,
      ruff and pyrefly (if installed beside it) on each commit's files, and
      the descriptions give the commands and counts. Slow (minutes per
      commit); without it the descriptions say that nothing was measured.

  Returns:
    The paths of the patch files, to ``git am`` in order.

  Raises:
    EnvironmentProblem: ``jax_repo`` is not a git checkout of jax.
    UsageError: git has no user identity to author the commits.
    ConflictError: no series applies exactly, and the three-way rebase of
      the newest series onto the checkout conflicts.
    PatchDataError: a test class or upstream's test file is not as expected
      (see ``add_tests``), a new import's Bazel dep cannot be added (see
      ``bazel_deps.update_build_files``), or a patch has no ``CHANGES``
      entry (see ``changes_by_subject``).
    UsageError: ``test_python`` is not an executable.
  """
  if not os.path.isdir(os.path.join(jax_repo, 'jax', '_src', 'pallas')):
    raise errors.EnvironmentProblem(f'{jax_repo} is not a jax checkout.')
  if test_python is not None:
    found = shutil.which(test_python)
    if found is None:
      raise errors.UsageError(
          f'--test_python {test_python}: no such executable.')
    test_python = os.path.abspath(found)  # the tests run in the worktree
  _git(['rev-parse', '--verify', 'HEAD'], jax_repo)
  identity = subprocess.run(
      [gitapply.git_executable(), 'var', 'GIT_AUTHOR_IDENT'], cwd=jax_repo,
      capture_output=True, text=True, check=False)
  if identity.returncode:
    raise errors.UsageError(
        'git has no user identity to author the commits: set user.name and '
        'user.email (git config --global), as the person who submits them.')
  states = None
  try:
    series = choose_series(manifest, jax_repo, series_name)
  except errors.ConflictError as exact_failure:
    series = (manifest.series[series_name] if series_name is not None
              else nearest_series(manifest, checkout_version(jax_repo)))
    states = patch_states(series)
    logging.info('%s\nRebasing %s onto the checkout with three-way merges.',
                 exact_failure, series.name)
  by_subject = changes_by_subject(manifest)
  patches = series.patches
  series_changes = [_change_of(by_subject, series, p) for p in patches]
  written = []
  work = tempfile.mkdtemp(prefix='export-upstream-')
  worktree = os.path.join(work, 'jax')
  staged = os.path.join(work, 'out')
  os.makedirs(staged)
  upstream_tests = sorted({t.upstream[0] for c in CHANGES for t in c.tests})
  # Only jax/ (the files the export touches, and the modules and BUILD
  # files the Bazel deps are found in), and tests/pallas/ are
  # checked out; the index holds the rest of HEAD, so the commits change
  # nothing else.
  _git(['worktree', 'add', '--detach', '--no-checkout', worktree, 'HEAD'],
       jax_repo)
  try:
    _git(['read-tree', 'HEAD'], worktree)
    paths = ['jax', TEST_DIR]
    if test_python:
      # What pytest reads: upstream's settings and conftest.
      paths += [p for p in ('pyproject.toml', 'conftest.py') if _git(
          ['ls-files', '--', p], worktree).strip()]
    _git(['checkout', 'HEAD', '--', *paths], worktree)
    if test_python:
      base_runs = _measure(worktree, test_python, pytest_runs.TPU_COMMANDS)
      others = pytest_runs.other_commands(worktree)
      base_others = _measure(worktree, test_python, others)
    descriptions = []
    for number, patch in enumerate(patches, start=1):
      change = series_changes[number - 1]
      touched = [*series.files, *upstream_tests]
      before = {}
      for f in touched:
        with open(os.path.join(worktree, f), encoding='utf-8') as fh:
          before[f] = fh.read()
      if states is None:
        gitapply.apply(patch.path, worktree)
      else:
        merge_patch(worktree, states[number - 1], states[number], patch)
      added = []
      for test in change.tests:
        with open(os.path.join(tests_dir, test.file), encoding='utf-8') as f:
          ours = f.read()
        methods = extract_methods(ours, test.name)
        target, cls = test.upstream
        _rewrite(os.path.join(worktree, target), lambda s, c=cls, m=methods,
                 i=import_lines(ours), e=side_effect_imports(ours):
                 add_tests(s, c, m, i, e))
        added.append((target, cls, [n for n, _ in methods]))
      builds = bazel_deps.update_build_files(worktree, before)
      _git(['add', '--', *touched, *builds], worktree)
      message = commit_message(patch)
      subprocess.run(
          [gitapply.git_executable(), 'commit', '-q', '-F', '-'],
          cwd=worktree, input=message, text=True, capture_output=True,
          check=True)
      written.append(_git(
          ['format-patch', '-1', '--zero-commit', '--no-signature',
           f'--start-number={number}', '-o', staged, 'HEAD'],
          worktree).strip())
      tested = None
      if test_python:
        runs = _measure(worktree, test_python, pytest_runs.TPU_COMMANDS)
        changed = _git(['diff', '--name-only', 'HEAD~1', 'HEAD'],
                       worktree).split()
        tested = (list(zip(base_runs, runs)),
                  run_linters(worktree, test_python, changed))
        base_runs = runs
      stat = _git(['show', '--stat', '--format=', 'HEAD'], worktree)
      descriptions.append((written[-1][:-len('.patch')] + '.md', message,
                           stat, added, change, tested))
    if test_python:
      top_others = _measure(worktree, test_python, others)
      base = _git(['rev-parse', '--short', f'HEAD~{len(patches)}'],
                  worktree).strip()
      setting = (f'On upstream {base} (CPU, '
                 f'{pytest_runs.environment(test_python)}, PYTHONPATH set '
                 'to the checkout)')
    for number, (path, message, stat, added, change, tested) in enumerate(
        descriptions, start=1):
      how = None
      if tested is not None:
        how = _tested_lines(setting, number, len(patches), *tested,
                            list(zip(base_others, top_others)))
      with open(path, 'w', encoding='utf-8') as f:
        f.write(pr_description(message, number, len(patches), stat,
                               added, change, how))
    # Only a complete export is written.
    os.makedirs(out_dir, exist_ok=True)
    for i, path in enumerate(written):
      shutil.copy(path[:-len('.patch')] + '.md', out_dir)
      written[i] = shutil.copy(path, out_dir)
  finally:
    subprocess.run([gitapply.git_executable(), 'worktree', 'remove',
                    '--force', worktree], cwd=jax_repo, capture_output=True,
                   check=False)
    shutil.rmtree(work, ignore_errors=True)
  return written


def _measure(worktree: str, python: str,
             commands) -> list[pytest_runs.TestRun]:
  """Runs pytest commands in the worktree, logging each result."""
  runs = []
  for args in commands:
    runs.append(pytest_runs.run(worktree, python, tuple(args)))
    logging.info('%s: %s (%.0f s)', runs[-1].command, runs[-1].summary(),
                 runs[-1].seconds)
  return runs


def _tested_lines(setting: str, number: int, total: int,
                  rows: list[tuple[pytest_runs.TestRun, pytest_runs.TestRun]],
                  linters: list[tuple[str, str]],
                  others: list[tuple[pytest_runs.TestRun,
                                     pytest_runs.TestRun]]) -> list[str]:
  """Returns the "How it was tested" lines of one measured commit.

  Args:
    setting: where the tests ran (upstream commit, jaxlib, Python).
    number: the commit's place in the stack (1-based).
    total: the number of commits.
    rows: the TPU interpreter's test runs before and after the commit.
    linters: ``(command, result)`` per linter run on its files.
    others: the other interpreter tests before the stack and after it all.
  """
  parent = ('upstream' if number == 1 else
            f'the first {number - 1} commit(s) of this stack')
  lines = [
      f'{setting}, measured by the export: upstream\'s TPU interpreter '
      f'tests on {parent} (before) and with this commit added (after), '
      'each file in its own pytest process:', '',
      *pytest_runs.table(rows, 'before this commit', 'with this commit'),
      '',
      'The emit_pipeline distributed tests are left out: they hang on '
      '2-core machines even without the stack.']
  if others:
    lines += [
        '', 'Upstream\'s other interpreter tests (the GPU interpreter\'s, '
        'its race detection, thread_map), before the stack and with all '
        f'{total} commits of it:', '',
        *pytest_runs.table(others, 'before the stack', 'with the stack')]
  if linters:
    lines += ['', *(f'- `{cmd}`: {result}' for cmd, result in linters)]
  return lines


def _rewrite(path: str, edit) -> None:
  with open(path, encoding='utf-8') as f:
    text = f.read()
  with open(path, 'w', encoding='utf-8') as f:
    f.write(edit(text))
