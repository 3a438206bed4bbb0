"""Export the series as a stack of single-commit upstream pull requests.

Upstream jax asks for one commit per pull request. Each patch of a series is
one change and one commit of the stack, in series order. For each patch, on
a scratch worktree of the given jax checkout (the checkout itself is never
touched), the export

1. applies the patch exactly (``git apply``, no fuzz), or, if no series
   applies exactly to the checkout, rebases it onto the checkout with a
   three-way merge (``git merge-file``) from the released files the series
   was made against; any conflict stops the export;
2. adds the patch's test classes (``CHANGES``) to upstream's test files: a
   test class of this repository's ``tests/pallas`` holds one patch's tests,
   and the export writes it, under its name, after the last class of
   upstream's ``tpu_pallas_interpret_test.py`` (or
   ``tpu_pallas_interpret_distributed_test.py``), with the decorators and
   ``setUp`` of upstream's ``InterpretTest`` (``InterpretDistributedTest``)
   and our methods' source (found with ``ast``) without the code fenced for
   older releases (``for_jax_head``), adding the imports they need; a class
   name upstream's file has, or a name it lacks that a method uses, stops
   the export;
3. adds to upstream's BUILD files the targets of the modules the commit
   newly imports, and a target for each module it adds (``bazel_deps``:
   upstream uses strict deps);
4. commits with the patch's subject and the change's short summary
   (``Change.summary``, else the patch's message without its DEP-3 header),
   authored by the user's git identity, and writes it with ``git
   format-patch``, ready for ``git am --keep-non-patch`` (which keeps the
   ``[Pallas]`` tag), with a pull request description beside it
   (``NNNN-....md``).

Where the checkout is older than the newest release served, the stack goes on
a first commit that gives the checkout's ``jax/`` that release's files
(``sync_to_release``), written as the ``0000-...`` patch, not for submission.

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
# A file of ours named `memories_*_test.py` or `extend_*_test.py` tests a
# fix to jax itself, not Pallas (0044's to the lowering of jitted functions,
# 0042's to the random primitives): its classes go to upstream's test file
# of that part of jax, with no upstream class's decorators or setUp (theirs
# skip on CPU, or there is none to take).
UPSTREAM_MEMORIES_TEST = (os.path.join('tests', 'memories_test.py'), None)
UPSTREAM_EXTEND_TEST = (os.path.join('tests', 'extend_test.py'), None)
UPSTREAM_CORE_TESTS = {'memories_': UPSTREAM_MEMORIES_TEST,
                       'extend_': UPSTREAM_EXTEND_TEST}
# The only paths an exported commit may touch: the interpreter, the PRNG
# primitives (0042), the lowering of jitted functions (0044), their tests and
# the BUILD files of their targets. No changelog:
# upstream's interpreter commits add none, and entries of stacked PRs would
# conflict.
ALLOWED_PATHS = ('jax/_src/pallas/mosaic/interpret/', 'jax/_src/random/prng.py',
                 'jax/_src/interpreters/mlir.py', 'jax/_src/BUILD',
                 'tests/pallas/', 'tests/BUILD') + tuple(
                     path for path, _ in UPSTREAM_CORE_TESTS.values())

# The tests also run on older jax releases. The code that only those need is
# fenced by these comment lines; inside a fence, a comment
# `# At jax HEAD: <code>` gives the code that replaces the fence.
OLDER_RELEASES_BEGIN = '# Older jax releases: begin.'
OLDER_RELEASES_END = '# Older jax releases: end.'
# A test method whose comment lines above it start with this runs on older
# releases only: it is not exported.
OLDER_RELEASES_ONLY = '# Older jax releases only:'
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
  def upstream(self) -> tuple[str, str | None]:
    """Upstream's test file (relative to the checkout) and the class there
    whose decorators and ``setUp`` ours takes (``add_test_class``)."""
    for prefix, upstream in UPSTREAM_CORE_TESTS.items():
      if self.file.startswith(prefix):
        return upstream
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

  ``summary``: the exported commit message's body, one to three sentences
  (upstream's interpreter commits are that short); the patch's own message,
  which says more, stays this repository's.
  """
  prefix: str | None
  tests: tuple[TestClass, ...]
  notes: str = ''
  summary: str = ''
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
_INTEGER_WIDTH = 'tpu_pallas_interpret_integer_width_test.py'
_DISABLE_BOUNDS_CHECKS = (
    'tpu_pallas_interpret_disable_bounds_checks_test.py')
_RANDOM_IMPL = 'tpu_pallas_interpret_random_impl_test.py'
_CORE_DEVICE_ID = 'tpu_pallas_interpret_core_device_id_test.py'
_DYNAMIC_GRID = 'tpu_pallas_interpret_dynamic_grid_test.py'
_SPARSECORE_BITCAST = 'tpu_pallas_interpret_sparsecore_bitcast_test.py'
_PRNG_UNSUPPORTED = 'tpu_pallas_interpret_prng_unsupported_test.py'
_REF_VIEW_UNSUPPORTED = 'tpu_pallas_interpret_ref_view_unsupported_test.py'
_MEMORIES_ORDERED_EFFECTS = 'memories_ordered_effects_test.py'
_EXTEND_RANDOM_ORDERED_EFFECTS = 'extend_random_ordered_effects_test.py'
_HOST_DMA = 'tpu_pallas_interpret_host_dma_test.py'
_REVISIT_ANY = 'tpu_pallas_interpret_revisit_test.py'
_DMA_SEMAPHORE_COUNT = 'tpu_pallas_interpret_dma_semaphore_count_test.py'
_MATMUL_PRECISION = 'tpu_pallas_interpret_matmul_precision_test.py'
_ERROR_LOCATION = 'tpu_pallas_interpret_error_location_test.py'
_DMA_RACE = 'tpu_pallas_interpret_dma_race_test.py'
_NONZERO_SEMAPHORE = 'tpu_pallas_interpret_nonzero_semaphore_test.py'
_VMEM_LIMIT = 'tpu_pallas_interpret_vmem_limit_test.py'
_FREE_BUFFERS = 'tpu_pallas_interpret_free_buffers_test.py'
_DEVICE_ID_LENGTH = 'tpu_pallas_interpret_device_id_length_test.py'
_PINNED_BUFFER = 'tpu_pallas_interpret_pinned_buffer_test.py'


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
        summary=(
            "Without `core_index`, `pl.semaphore_signal` incremented core 0's "
            'semaphore whichever core signalled, so on a multi-core '
            '`pltpu.TensorCoreMesh` a core that signalled and then waited on '
            'its own semaphore hung. The signal now goes to the calling core '
            '(or, on a remote device, the core with the same index), as on a '
            'TPU.'),
        tests=_tests(_SEMAPHORE, 'InterpretLocalSignalTest'),
    ),
    Change(
        prefix='0002',
        summary=(
            '`pl.semaphore_read` failed in TPU interpret mode because it had '
            "no lowering rule for the CPU. It now returns the calling core's "
            'semaphore count as an int32, and with '
            "`dma_execution_mode='on_wait'` it first runs one DMA queued on "
            'the semaphore, so a kernel that polls a DMA semaphore until it '
            'is non-zero does not spin forever.'),
        tests=_tests(_SEMAPHORE, 'InterpretSemaphoreReadTest'),
    ),
    Change(
        prefix='0003',
        summary=(
            '`pl.semaphore_wait(sem, value, decrement=False)` raised '
            '`NotImplementedError` in TPU interpret mode. With the new '
            '`InterpretParams(allow_non_decrementing_semaphore_wait=True)`, '
            "it blocks until the calling core's count reaches `value` and "
            'leaves the count unchanged, as `pl.semaphore_wait` documents and '
            'Mosaic GPU implements, so kernels written that way can be '
            'prototyped on CPU. The option defaults to `False` because the '
            'Mosaic TPU compiler does not support non-decrementing waits.'),
        tests=_tests(_SEMAPHORE, 'InterpretNonDecrementingWaitTest',
                     'InterpretSemaphoreDistributedTest'),
    ),
    Change(
        prefix='0004',
        summary=(
            '`pl.run_scoped(..., collective_axes=...)` raised '
            '`NotImplementedError` in TPU interpret mode. With the new '
            '`InterpretParams(allow_collective_axes_in_run_scoped=True)`, a '
            '`run_scoped` over the core axes of a `pltpu.TensorCoreMesh` '
            'gives all cores of a device one shared buffer and one count per '
            'semaphore, as `pl.run_scoped` documents and Mosaic GPU does for '
            "a block's warpgroups. The option defaults to `False` because the "
            'Mosaic TPU compiler does not support `collective_axes`.'),
        tests=_tests(_COLLECTIVE, 'InterpretCollectiveRunScopedTest',
                     'InterpretCollectiveRunScopedDistributedTest'),
        # The review of 2026-12-05 asks to cut the stack by logical change,
        # not to fit a size (issue 43).
        max_changed_lines=(750, 'two test classes of its own, whose tests '
                                "ask for jax 0.12's on_race='warn'"),
    ),
    Change(
        prefix='0005',
        summary=(
            'Every core along the `collective_axes` of a `pl.run_scoped` must '
            'make the same allocation, but TPU interpret mode did not check '
            'this. A core that makes a different allocation now raises a '
            '`ValueError` naming both allocations, and a core that never '
            'enters the `run_scoped` causes a `RuntimeError` when the kernel '
            'ends.'),
        tests=_tests(_COLLECTIVE, 'InterpretCollectiveRunScopedMisuseTest'),
    ),
    Change(
        prefix='0006',
        summary=(
            'A kernel whose semaphore or DMA wait could never be satisfied '
            'hung TPU interpret mode forever. When every core is blocked or '
            'finished and no blocked wait can make progress, the kernel now '
            'fails with a `DeadlockError` that names each blocked wait, its '
            'semaphore count and the awaited value. The check is on by '
            'default; `InterpretParams(detect_deadlocks=False)` turns it off.'),
        tests=_tests(_DEADLOCK, 'InterpretDeadlockTest',
                     'InterpretDeadlockDistributedTest'),
        notes=(
            'Deadlock detection is on by default (`detect_deadlocks=True`): '
            'a kernel that deadlocks now fails with a `JaxRuntimeError` '
            'naming a `DeadlockError` instead of hanging, which changes '
            'what existing kernels do; `detect_deadlocks=False` keeps the '
            'hang. A core that polls `pl.semaphore_read` in a loop never '
            'blocks and is not detected. Detection on over off took 0.99x '
            'to 1.03x the CPU time per call (two kernels, three runs each, '
            '2026-12-01).'),
    ),
    Change(
        prefix='0007',
        summary=(
            'On a `plsc.VectorSubcoreMesh` or `plsc.ScalarSubcoreMesh`, TPU '
            'interpret mode ran a single thread on which every `axis_index` '
            'was 0, so kernels left output slices unwritten and '
            '`plsc.subcore_barrier` failed. Every (core, subcore) point now '
            'runs as its own simulated core, with private `VMEM`, '
            '`VMEM_SHARED` shared by the subcores of each SparseCore, and a '
            'working `plsc.subcore_barrier`.'),
        tests=_tests(_SPARSECORE, 'InterpretSparseCoreTest'),
        # The review of 2026-12-05 asks to split it (issue 43): the
        # collective scopes over the subcore axis as a change of their own.
        max_changed_lines=(760, 'the fix of its collective allocation '
                                'records, until the split'),
    ),
    Change(
        prefix='0008',
        summary=(
            'TPU interpret mode raised `NotImplementedError` for masked loads '
            'and failed on `plsc.load_gather`, `plsc.store_scatter`, '
            '`plsc.addupdate_scatter` and `plsc.parallel_loop`. These now '
            'work in SparseCore kernels, reading and writing only the '
            'elements their mask selects. As with the Mosaic TPU compiler, a '
            'masked load in a TensorCore kernel still raises, and gathers and '
            'scatters on non-VMEM refs raise its `ValueError`.'),
        tests=_tests(_SPARSECORE, 'InterpretSparseCoreLoadStoreTest'),
    ),
    Change(
        prefix='0009',
        summary=(
            'TPU interpret mode ignored `pltpu.prng_seed` and returned zeros '
            'from `pltpu.prng_random_bits`, so every seed gave the same bits '
            'and sampling with Pallas keys failed to lower. Each core now has '
            'its own seeded generator whose state carries across draws and '
            'grid steps; the bits depend only on the seeds and earlier draws, '
            'but differ from the bits a TPU produces.'),
        tests=_tests(_PRNG, 'InterpretPrngTest'),
    ),
    Change(
        prefix='0010',
        summary=(
            'With `pl.enable_debug_checks`, Mosaic lowers `pl.debug_check` to '
            'an assertion that fails the kernel on a TPU, but TPU interpret '
            'mode dropped the check. A failing check now raises an '
            '`AssertionError` naming the device, core, location and message, '
            'and non-debug checks raise `NotImplementedError`, as the Mosaic '
            'TPU compiler does.'),
        tests=_tests(_DEBUG_CHECK, 'InterpretDebugCheckTest'),
    ),
    Change(
        prefix='0011',
        summary=(
            'TPU interpret mode raised `NotImplementedError: Unsupported '
            'memory space` for `pallas_call` inputs constrained to VMEM or '
            'SMEM with `pltpu.with_memory_space_constraint` or '
            '`jax.new_ref(x, memory_space=...)`. Because the constraint does '
            'not change the value, the interpreter now drops it, as it '
            'already did for HBM and ANY. An output aliased to such an input '
            'raises `NotImplementedError` instead of computing with an '
            'uninitialized buffer.'),
        tests=_tests(_MEMORY_SPACE, 'InterpretMemorySpaceConstraintTest'),
    ),
    Change(
        prefix='0012',
        summary=(
            'Semaphore-typed `pallas_call` operands, such as '
            '`pltpu.SemaphoreType.DMA(())` in `out_shape`, let a DMA started '
            'in one kernel be waited on in the next, but TPU interpret mode '
            'raised `NotImplementedError` for them. The interpreter now '
            'represents them by their semaphore counts as int32 data, '
            "completing the DMAs still queued on an output's semaphores "
            'before returning it.'),
        tests=_tests(_SEMAPHORE_OUTPUT, 'InterpretSemaphoreOutputTest'),
    ),
    Change(
        prefix='0013',
        summary=(
            'Loads, stores, swaps and DMAs through a view made with '
            '`ref.reshape` or `ref.bitcast` failed in TPU interpret mode with '
            'an `AttributeError`. The interpreter now applies these '
            'transforms to the indexed range as the state discharge rules do, '
            "with bitcasts following the layout of Mosaic's "
            '`tpu.memref_bitcast`. Other ref transforms raise '
            '`NotImplementedError` at trace time instead of failing in a '
            'callback.'),
        tests=_tests(_REF_VIEW, 'InterpretRefViewTest'),
    ),
    Change(
        prefix='0014',
        summary=(
            'Scalars that a `pl.kernel` or `pl.core_map` body closes over '
            'were replaced by the id of an HBM buffer, so a ref or DMA '
            'indexed by such a scalar raised a spurious out-of-bounds error '
            'or used the wrong element. Inputs that the kernel takes as '
            'values are now passed as values; Refs are still passed as buffer '
            'ids.'),
        tests=_tests(_CAPTURED_SCALAR, 'InterpretCapturedScalarTest'),
    ),
    Change(
        prefix='0015',
        summary=(
            'TPU interpret mode copied each pallas_call block between HBM and '
            "the kernel's buffer with two io_callbacks, a `get` and a "
            '`store`, and each callback has a transfer cost. Each block is '
            'now copied in one `copy_block` callback, and output blocks are '
            'copied in the existing revisiting-check callback, with the same '
            'memory accesses, errors and race detection as before.'),
        tests=_tests(_BLOCK_COPY, 'InterpretBlockCopyTest'),
    ),
    Change(
        prefix='0016',
        summary=(
            'TPU interpret mode raised `NotImplementedError` for any kernel '
            'with a PRNG key-typed input, output or scratch buffer, which '
            'Mosaic supports. The interpreter now holds such arrays as their '
            'key data, wraps and unwraps keys on loads and stores, and '
            "interprets `jax.random.fold_in` of a Pallas key and `pltpu`'s "
            '`unwrap_pallas_seed` and `wrap_pallas_seed` as Mosaic lowers '
            'them.'),
        tests=_tests(_PRNG_KEY, 'InterpretPrngKeyTest'),
    ),
    Change(
        prefix='0017',
        summary=(
            'Adds interpret-mode rules for `pltpu.matmul_push_rhs`, '
            '`pltpu.matmul_lhs_fifo` and `pltpu.matmul_pop_fifo`, so kernels '
            "that drive the MXU explicitly can run on CPU. Each core's MXUs "
            'are modeled with a staging register and a result FIFO, and '
            'popping an empty FIFO raises the same error as Mosaic.'),
        tests=_tests(_MXU, 'InterpretExplicitMXUTest'),
    ),
    Change(
        prefix='0018',
        summary=(
            '`plsc.load_expanded`, `plsc.store_compressed`, `plsc.addupdate`, '
            '`plsc.addupdate_compressed` and `plsc.fetch_and_add` had no '
            'interpret-mode rule and failed with an obscure tracing error. '
            'The interpreter now runs them as masked reads and writes and '
            'atomic updates, and a primitive without a rule that reads or '
            'writes a ref raises a `NotImplementedError` naming it.'),
        tests=_tests(_KERNEL_EFFECTS, 'InterpretSparseCoreRefEffectsTest'),
    ),
    Change(
        prefix='0019',
        summary=(
            '`plsc.sort_key_val`, `plsc.cumsum`, `plsc.cummax`, '
            '`plsc.cummin`, `plsc.all_reduce_population_count` and '
            '`plsc.all_reduce_ffs` failed in TPU interpret mode because their '
            'primitives have no CPU lowering. The interpreter now evaluates '
            'them with jax.numpy, following the semantics in their '
            'docstrings.'),
        tests=_tests(_SPARSECORE_VECTOR, 'InterpretSparseCoreVectorTest'),
    ),
    Change(
        prefix='0020',
        summary=(
            'TPU interpret mode copied each changed input block of a grid '
            'step in its own io_callback under its own `lax.cond`. All of a '
            "step's input blocks are now copied in one callback whose dynamic "
            'arguments are packed into one int32 array, which reduces '
            'per-step callback overhead; the same blocks are copied in the '
            'same order as before.'),
        tests=_tests(_STEP_COPY, 'InterpretStepCopyTest'),
        # The review of 2026-12-05 asks to squash #15, #20 and #23 into one
        # change (issue 43).
        max_changed_lines=(730, 'its test class, until it is squashed with '
                                '#15 and #23'),
    ),
    Change(
        prefix='0021',
        summary=(
            'Mosaic supports `pl.select_ref` in DMAs, but TPU interpret mode '
            'raised `NotImplementedError` for them. The interpreter now turns '
            'each selection in a DMA start or wait into a `lax.switch` on the '
            'runtime index and, like Mosaic, selects the last ref when the '
            'index is out of range.'),
        tests=_tests(_SELECT_REF, 'InterpretSelectRefTest',
                     'InterpretSelectRefDistributedTest'),
    ),
    Change(
        prefix='0022',
        summary=(
            '`plsc.pack` and `plsc.unpack` have no CPU lowering, so '
            'SparseCore kernels that used them failed in TPU interpret mode. '
            'The interpreter now evaluates them with jax.numpy, using the '
            '`INTERLEAVED` and `COMPRESSED` layouts that `plsc.PackFormat` '
            'documents.'),
        tests=_tests(_SPARSECORE_PACK, 'InterpretSparseCorePackTest'),
    ),
    Change(
        prefix='0023',
        summary=(
            'TPU interpret mode ran one io_callback at the end of each grid '
            'step to copy output blocks and another at the start of the next '
            'to copy input blocks. The end-of-step callback now also copies '
            "the next step's changed input blocks, so a kernel whose blocked "
            'inputs change at every step makes one block-copy callback per '
            'step instead of two.'),
        tests=_tests(_STEP_END_COPY, 'InterpretStepEndCopyTest'),
    ),
    Change(
        prefix='0024',
        summary=(
            'A kernel that allocated a scratch buffer with `jax.empty_ref` '
            'failed in TPU interpret mode with a state-discharge error. '
            'Matching Mosaic, the interpreter now allocates the buffer in the '
            "ref's memory space, as `run_scoped` does, and frees it at the "
            'end of the enclosing jaxpr; HBM raises a `ValueError` and '
            'semaphores raise `NotImplementedError`.'),
        tests=_tests(_EMPTY_REF, 'InterpretEmptyRefTest'),
    ),
    Change(
        prefix='0025',
        summary=(
            "TPU interpret mode's rule for the `emit_pipeline` primitive "
            '(bound with `jax_use_emit_pipeline_primitive` on) gave '
            "`pl.num_programs` in the body the kernel's grid size, not the "
            "pipeline's, and failed on `pl.MemorySpace.KEY` blocks, nested "
            'pipelines and, under `vmap`, `pl.num_programs` in index maps. It '
            'now does as Mosaic does; 21 of upstream\'s pipeline tests that '
            'failed pass.'),
        tests=_tests(_EMIT_PIPELINE_PRIMITIVE,
                     'InterpretEmitPipelinePrimitiveTest'),
        notes=('The 21 tests: `tests/pallas/tpu_pallas_pipeline_test.py -k '
               '"Primitive or axis_queries"` run in TPU interpret mode as on '
               'a TPU v6e (every `pallas_call` and `core_map` under '
               '`pltpu.force_tpu_interpret_mode`), 2026-12-06: '
               '`test_key_memory_space`, the 18 nested-pipeline tests of '
               '`PallasCallPipelineTransformedRefsPrimitiveTest` and '
               '`PallasCallPipelineNonFlatArgsPrimitiveTest`, and '
               '`test_num_programs_index_map_vmap0` and '
               '`test_num_programs_index_map_and_body_vmap0`; 131 of the 153 '
               'pass, 10 skip, and the other 12 (matmul tolerances, the '
               'padded-pipeline matmuls) fail with the flag off too.'),
    ),
    Change(
        prefix='0026',
        summary=(
            'On SparseCore, `pltpu.sync_copy` and `pltpu.async_copy` with a '
            'vector of indices gather or scatter rows, but TPU interpret mode '
            'treated the indices as a scalar and failed. The interpreter now '
            'gathers and scatters row by row, supporting `plsc.Indices(..., '
            'ignored_value=v)` and `add=True`, and raises the errors Mosaic '
            'raises for unsupported indexing.'),
        tests=_tests(_SPARSECORE_GATHER, 'InterpretSparseCoreGatherTest'),
    ),
    Change(
        prefix='0027',
        summary=(
            'In kernels on a SparseCore mesh, TPU interpret mode now raises '
            'the `NotImplementedError` that Mosaic raises for loads and '
            'stores its SparseCore lowering cannot handle (such as direct '
            'access to `VMEM_SHARED` or non-unit strides) and for '
            '`lax.cumsum` other than a forward scan of a vector. Previously '
            'such kernels ran in interpret mode but failed to compile for a '
            'TPU.'),
        tests=_tests(_SPARSECORE_LOWERING, 'InterpretSparseCoreLoweringTest'),
    ),
    Change(
        prefix='0028',
        summary=(
            'TPU interpret mode now supports refs in memory spaces tied to a '
            'mesh, such as `pltpu.VMEM(shape, dtype) @ mesh`, in kernel '
            'arguments, scratch, `run_scoped` and `jax.empty_ref`; previously '
            'they failed with a `KeyError`. Memory of cores of another type '
            "than the kernel's raises `NotImplementedError`, since the "
            'interpreter does not simulate it.'),
        tests=_tests(_CORE_MEMORY_SPACE, 'InterpretCoreMemorySpaceTest'),
    ),
    Change(
        prefix='0029',
        summary=(
            'TPU interpret mode now evaluates the SparseCore primitive '
            '`plsc.scan_count`, which previously had no CPU rule and failed. '
            'The interpreter computes it with jax.numpy following the '
            'semantics of `tpu.scan_count`, comparing floats with `==` '
            "because the hardware's comparison of signed zeros and NaNs is "
            'not documented.'),
        tests=_tests(_SPARSECORE_SCAN_COUNT,
                     'InterpretSparseCoreScanCountTest'),
    ),
    Change(
        prefix='0030',
        summary=(
            'With `jax_pallas_poison_buffers` on '
            '(`pl.enable_poison_buffers`), TPU interpret mode now fills '
            'buffers allocated by `run_scoped` or `jax.empty_ref` with '
            "Mosaic's poison values instead of its uninitialized value. A "
            'kernel that reads such a buffer before writing it now sees the '
            'same values as on a TPU, regardless of '
            '`InterpretParams.uninitialized_memory`.'),
        tests=_tests(_POISON_BUFFERS, 'InterpretPoisonBuffersTest'),
    ),
    Change(
        prefix='0031',
        summary=(
            'TPU interpret mode now passes NumPy arrays to the callbacks '
            'that run each load, store, DMA and semaphore operation, instead '
            'of using `io_callback`, which converted every argument to a '
            '`jax.Array` on a CPU device and back. Those conversions cost '
            "more than the interpreter's work (a SparseCore kernel: 64 s, now "
            "11 s), and an input's buffer is now XLA's array, not a copy."),
        tests=_tests(_CALLBACK_ARGS, 'InterpretCallbackArgsTest'),
    ),
    Change(
        prefix='0032',
        summary=(
            'TPU interpret mode now converts the indices of ref transforms to '
            'Python ints by walking `NDIndexer`s and `Slice`s directly rather '
            'than flattening them as pytrees with `jax.tree.map`. The pytree '
            'round trip cost more than the small load or store each callback '
            "performs, so this reduces the interpreter's overhead per grid "
            'step.'),
        tests=_tests(_TRANSFORMS_TO_INTS, 'InterpretTransformsToIntsTest'),
    ),
    Change(
        prefix='0033',
        summary=(
            'TPU interpret mode now supports refs in VMEM or SMEM captured by '
            '`pl.kernel` (e.g. `jax.new_ref(x, memory_space=pltpu.SMEM)`), '
            'which become inputs aliased to outputs and are updated in place '
            'on a TPU. Previously the interpreter raised '
            '`NotImplementedError` for them; other aliased inputs, such as '
            'blocked ones, still raise it.'),
        tests=_tests(_IN_PLACE_REF, 'InterpretInPlaceRefTest'),
    ),
    Change(
        prefix='0034',
        summary=(
            'TPU interpret mode now runs `pltpu.pack_elementwise` and '
            '`pltpu.unpack_elementwise`, which previously failed because they '
            'had no CPU lowering rule. They are implemented as jax.numpy bit '
            'operations following their docstrings, and treat float32 '
            'subnormals and bfloat16 NaNs as a TPU v5e does.'),
        tests=_tests(_PACK_ELEMENTWISE, 'InterpretPackElementwiseTest'),
    ),
    Change(
        prefix='0035',
        summary=(
            'In TPU interpret mode, a DMA now signals a '
            '`pltpu.SemaphoreType.REGULAR` semaphore by 1 rather than by the '
            'number of bytes copied, as TPU v6 and newer do; DMA semaphores '
            'still count bytes. Previously a `pl.semaphore_wait` on such a '
            'semaphore could return before its DMA ran, silently leaving the '
            'output uninitialized.'),
        tests=_tests(_REGULAR_SEMAPHORE_DMA,
                     'InterpretRegularSemaphoreDmaTest'),
    ),
    Change(
        prefix='0036',
        summary=(
            'Adds `InterpretParams(device_kind=...)` (default `None`) to name '
            'the TPU that interpret mode simulates, such as "TPU v6 lite". On '
            'CPU, `pltpu.get_tpu_info()` raises an error, which broke '
            '`emit_pipeline`, the SparseCore meshes and '
            '`buffer_bounds="padded"` unless callers set a TPU abstract mesh '
            'with `jax.sharding.use_abstract_mesh`. Under '
            '`force_tpu_interpret_mode` or `set_tpu_interpret_mode` with a '
            '`device_kind`, the abstract mesh in context gets that TPU as its '
            'abstract device.'),
        tests=_tests(_SIMULATED_TPU, 'InterpretSimulatedTpuTest'),
    ),
    Change(
        prefix='0037',
        summary=(
            'Under `shard_map` with `check_vma=True`, TPU interpret mode now '
            'makes the inputs of each operation it evaluates vary over the '
            'same manual axes, as traced jax operations do. Previously mixing '
            "a device axis's `lax.axis_index` with a constant, e.g. `1 - "
            'lax.axis_index(\'x\')`, failed with "Primitive sub requires '
            'varying manual axes to match".'),
        tests=(TestClass(_MANUAL_AXES, 'InterpretManualAxesDistributedTest'),),
    ),
    Change(
        prefix='0038',
        summary=(
            'TPU interpret mode now bounds-checks a masked store (e.g. '
            '`pltpu.store(ref, value, mask=mask)` or a SparseCore scatter) in '
            'every dimension of the buffer, as the masked load does, rather '
            'than only the first. Previously a store to a slice shorter than '
            'the buffer in another dimension, as in ragged paged attention, '
            'failed with "Out-of-bounds masked swap".'),
        tests=_tests(_MASKED_STORE, 'InterpretMaskedStoreTest'),
    ),
    Change(
        prefix='0039',
        summary=(
            'TPU interpret mode now runs `pltpu.stochastic_round`, which '
            'previously failed because it had no CPU lowering rule. Each '
            'float32 element is rounded to one of its two neighbours in the '
            'target dtype, chosen by its random bits as measured on a TPU '
            "v5e, and unsupported dtypes raise the `ValueError` that Mosaic's "
            'lowering raises.'),
        tests=_tests(_STOCHASTIC_ROUND, 'InterpretStochasticRoundTest'),
    ),
    Change(
        prefix='0040',
        summary=(
            "In TensorCore kernels, TPU interpret mode now raises Mosaic's "
            'errors for unsigned integer matmuls, masked stores of data '
            'narrower than 32 bits, and integer arithmetic on scalars '
            'narrower than 32 bits or vectors narrower than 16 (with a '
            'simulated TPU v5e, also what that chip failed to compile). '
            'The interpreter ran these, so such a kernel failed only once '
            'it reached a TPU.'),
        tests=(_tests(_UNSIGNED_MATMUL, 'InterpretUnsignedMatmulTest')
               + _tests(_NARROW_MASKED_STORE,
                        'InterpretNarrowMaskedStoreTest')
               + _tests(_INTEGER_WIDTH, 'InterpretIntegerWidthTest')),
    ),
    Change(
        prefix='0041',
        summary=(
            'TPU interpret mode now honors '
            '`pltpu.CompilerParams(disable_bounds_checks=True)`: the part of '
            'a read past the end of a buffer gets `uninitialized_memory` '
            'values, as with '
            '`InterpretParams(out_of_bounds_reads="uninitialized")`, instead '
            'of failing with "Out-of-bounds read". Writes past the end still '
            'raise, since what they would overwrite on a TPU is not modelled.'),
        tests=_tests(_DISABLE_BOUNDS_CHECKS,
                     'InterpretDisableBoundsChecksTest'),
    ),
    Change(
        prefix='0042',
        summary=(
            'A PRNG implementation whose functions have ordered effects, '
            'such as an ordered `jax.debug.callback` or a Pallas TPU kernel '
            'in interpret mode, failed under `jit` with a `KeyError` naming '
            'the effect: the random primitives declared no effects, so their '
            'lowerings got no tokens. They now declare the ordered effects of '
            "the implementation's functions, found by tracing them; JAX's "
            'threefry, rbg and philox implementations are not traced.'),
        tests=(_tests(_EXTEND_RANDOM_ORDERED_EFFECTS,
                      'RandomImplOrderedEffectsTest')
               + _tests(_RANDOM_IMPL, 'InterpretRandomImplTest')),
        notes=('Not a Pallas change: the tests of the fix itself are a class '
               'of `tests/extend_test.py` (no Pallas); the Pallas tests show '
               'the use that needs it. Tracing `bits` and `uniform` of a new '
               'shape (and `key`, `split`, `fold_in`) with the default '
               'implementation (`jax.make_jaxpr`), CPU time with / without '
               'this commit (jax 0.12.0.1, 2026-12-07): 0.993 (median of 10 '
               'pairs of processes); 1.093 when every implementation was '
               'traced (2 pairs).'),
    ),
    Change(
        prefix='0043',
        summary=(
            'TPU interpret mode now accepts a dynamic grid size given as an '
            'array of one element, which `pallas_call` and Mosaic accept, '
            'instead of failing with `TypeError: Pred must be a scalar`. A '
            'size with more than one element raises `NotImplementedError`.'),
        tests=_tests(_DYNAMIC_GRID, 'InterpretDynamicGridTest'),
    ),
    Change(
        prefix='0044',
        summary=(
            'A jitted function with ordered effects, such as '
            '`io_callback(..., ordered=True)`, whose outputs are in another '
            'memory kind (`pinned_host`) failed to lower with `ValueError: '
            'safe_zip()`: `lower_jaxpr_to_fun` prefixed the result memory '
            "kinds with the effects' tokens, but not the propagated ones. "
            'Both now get the prefix.'),
        tests=_tests(_MEMORIES_ORDERED_EFFECTS, 'OrderedEffectsMemoriesTest'),
        notes=('Upstream\'s open pull request '
               'https://github.com/jax-ml/jax/pull/40108 (2026-08-20) makes '
               'the same fix; its review stopped at its test\'s `ImportError` '
               'for `from jax.experimental import io_callback`, which the '
               '`//jax/experimental` dep added here to `tests/BUILD` provides. '
               'Offer these tests there, or drop this commit once it has '
               'landed.'),
    ),
    Change(
        prefix='0045',
        summary=(
            'Kernels that copy between host memory (`pl.HOST`) and HBM with '
            '`pltpu.sync_copy` or `pltpu.async_copy` failed in TPU interpret '
            'mode with a `KeyError`. The interpreter now treats host refs as '
            'HBM buffers, so such a DMA is a copy.'),
        tests=_tests(_HOST_DMA, 'InterpretHostDmaTest'),
    ),
    Change(
        prefix='0046',
        summary=(
            'TPU interpret mode now supports outputs with '
            '`pipeline_mode=pl.Buffered(1, revisit=pl.RevisitMode.ANY)`: like '
            'Mosaic, it reads an output block back from HBM when the block is '
            'revisited, so a kernel can accumulate into it after visiting '
            'other blocks instead of failing with "Revisited block". '
            "`RevisitMode.ANY` with more than one buffer raises Mosaic's "
            'error.'),
        tests=_tests(_REVISIT_ANY, 'InterpretRevisitAnyTest'),
    ),
    Change(
        prefix='0047',
        summary=(
            'In TPU interpret mode, a DMA signaled its semaphore with the '
            'number of bytes copied, while a TPU counts 32-byte units of the '
            "array's tiled layout, so kernels that read a DMA semaphore with "
            '`pl.semaphore_read` or wait for an explicit count saw different '
            'values. DMAs now signal, and `.wait()` consumes, the count a TPU '
            'uses.'),
        tests=_tests(_DMA_SEMAPHORE_COUNT, 'InterpretDmaSemaphoreCountTest'),
    ),
    Change(
        prefix='0048',
        summary=(
            'At the default precision, a TPU rounds float32 matmul operands '
            'to bfloat16, so a kernel could pass in interpret mode but lose '
            'precision on a TPU. The new option '
            '`InterpretParams(matmul_precision="tpu")` rounds the operands '
            'the same way and sums the products in the order of a TPU '
            "v5e's MXU; the default, `\"float32\"`, keeps the current "
            'results, which match XLA on CPU.'),
        tests=_tests(_MATMUL_PRECISION, 'InterpretMatmulPrecisionTest'),
    ),
    Change(
        prefix='0049',
        summary=(
            'Out-of-bounds errors and race reports in TPU interpret mode now '
            'name the kernel argument, the kernel source line of the access, '
            'and the accessed range in NumPy slice notation, instead of '
            'internal buffer ids, thread ids and vector clocks. Deadlock '
            'reports and reports of a semaphore left non-zero at kernel exit '
            "also name the semaphore's kernel argument."),
        tests=_tests(_ERROR_LOCATION, 'InterpretErrorLocationTest'),
    ),
    Change(
        prefix='0050',
        summary=(
            "With `dma_execution_mode='on_wait'` (the default) and "
            '`detect_races=True`, a DMA that was never waited for never '
            'copied, so a kernel that read its destination read stale memory '
            'and no race was reported. A DMA now records its source read and '
            'destination write when it starts, as `eager` mode does, so such '
            'a read is reported as a race.'),
        tests=_tests(_DMA_RACE, 'InterpretDmaRaceTest'),
    ),
    Change(
        prefix='0051',
        summary=(
            'Adds `InterpretParams(on_nonzero_semaphore_at_exit=...)`, which '
            'controls what happens when a kernel ends with a non-zero '
            'semaphore count, for example after a DMA that was never waited '
            "for. With `'raise'`, the kernel fails with a `RuntimeError` "
            "naming every such semaphore; the default, `'print'`, prints the "
            'first one as before.'),
        tests=_tests(_NONZERO_SEMAPHORE, 'InterpretNonzeroSemaphoreTest'),
    ),
    Change(
        prefix='0052',
        summary=(
            'Mosaic rejects a kernel whose VMEM blocks or scratch operands '
            "exceed the TPU's VMEM or the kernel's scoped VMEM limit, but "
            "interpret mode ran it. Interpret mode now raises Mosaic's "
            'RESOURCE_EXHAUSTED `JaxRuntimeError`, checking against the '
            "simulated TPU's VMEM and the scoped limit from "
            '`CompilerParams.vmem_limit_bytes`, `LIBTPU_INIT_ARGS`, or the '
            "simulated TPU's default; and Mosaic's error for an "
            '`internal_scratch_in_bytes` larger than the VMEM or, on a TPU '
            'v5e, below its minimum.'),
        tests=_tests(_VMEM_LIMIT, 'InterpretVmemLimitTest'),
    ),
    Change(
        prefix='0053',
        summary=(
            "Each semaphore of the interpreter's shared memory referred back "
            'to it, so the memory and all of a kernel\'s buffers outlived the '
            "kernel until Python's cyclic garbage collector ran; a loop of "
            'calls with large inputs could run out of memory (upstream\'s '
            '`test_large_array_indexing`). A semaphore now refers to its '
            'memory weakly.'),
        tests=_tests(_FREE_BUFFERS, 'InterpretFreeBuffersTest'),
    ),
    Change(
        prefix='0054',
        summary=(
            'A device id of mesh coordinates with more or fewer coordinates '
            'than the mesh has axes failed in TPU interpret mode with an '
            "`AssertionError` without a message. It now raises Mosaic's "
            "`ValueError`, 'Number of device ids must match the number of "
            "mesh axes, but got 2 ids for a 0D mesh.'"),
        tests=_tests(_DEVICE_ID_LENGTH, 'InterpretDeviceIdLengthTest'),
    ),
    Change(
        prefix='0055',
        summary=(
            'A `pallas_call` whose input is a pinned buffer (`pin`) failed in '
            'TPU interpret mode with `TypeError: No xla_shape_handler for '
            "type: ...AbstractLinVal`. It now raises `NotImplementedError` "
            'naming the input and `pin`: only XLA:TPU has the `Pin` custom '
            'call.'),
        tests=_tests(_PINNED_BUFFER, 'InterpretPinnedBufferTest'),
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
    Change(
        prefix=None,
        tests=_tests(_EMIT_PIPELINE_PRIMITIVE,
                     'InterpretEmitPipelinePrimitiveTest'),
        subject=('[Pallas] In TPU Interpret Mode, run the `emit_pipeline` '
                 'primitive.'),
        notes=('Only the series for jax 0.11.0 and 0.11.1 have this patch: '
               'their interpreters have no rule for the `emit_pipeline` '
               'primitive, so it adds one, where 0025 fixes the rule of jax '
               '0.11.2 and newer (the same tests). Not for upstream, whose '
               'interpreter is newer.'),
    ),
    Change(
        prefix=None,
        tests=_tests(_REF_VIEW_UNSUPPORTED, 'InterpretRefViewUnsupportedTest'),
        subject=('[Pallas] In TPU Interpret Mode, raise NotImplementedError '
                 'for views of refs.'),
        notes=('Only the series for jax 0.10 have this patch: there a view '
               'of a ref failed with an AttributeError in a callback, and '
               'patch 0013, which runs views, does not carry. Not for '
               'upstream, whose interpreter is newer.'),
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


def newest_release(manifest: manifest_lib.Manifest,
                   jax_repo: str) -> str | None:
  """Returns the newest release the manifest serves, if newer than a checkout.

  Upstream's main branch is ahead of every release, but a checkout (a
  mirror) can lag behind the newest release; then that release's files are
  the newest upstream code there is to target.

  Args:
    manifest: the loaded manifest.
    jax_repo: a jax checkout.

  Returns:
    The version (e.g. ``0.12.0.1``), or None when the checkout's
    ``jax/version.py`` is at or past it.
  """
  newest = manifest.served_versions()[-1]
  version = checkout_version(jax_repo)
  if version is not None and (manifest_lib.version_key(version)
                              >= manifest_lib.version_key(newest)):
    return None
  return newest


def sync_to_release(worktree: str, version: str,
                    manifest: manifest_lib.Manifest) -> int:
  """Commits, in a worktree, ``jax/`` as the released wheel of a version has it.

  Every file of the wheel's ``jax/`` replaces the checkout's (files the
  wheel lacks, such as the BUILD files, stay as they are), so the
  interpreter and every module it imports are the release's, and the
  series made against that release applies exactly. Tests are the
  checkout's: a wheel has none.

  Args:
    worktree: a git worktree with ``jax/`` checked out.
    version: a release the manifest serves.
    manifest: the loaded manifest (for the wheel's sha256).

  Returns:
    The number of files the commit changes.

  Raises:
    EnvironmentProblem: the wheel cannot be found, downloaded or read.
  """
  wheel = wheels.pristine_wheel(version, sha256=manifest.wheel_sha256(version))
  with zipfile.ZipFile(wheel) as zf:
    members = [n for n in zf.namelist()
               if n.startswith('jax/') and not n.endswith('/')]
  wheels.extract(wheel, members, worktree)
  _git(['add', '--', 'jax'], worktree)
  changed = len(_git(['diff', '--cached', '--name-only'], worktree).split())
  subprocess.run(
      [gitapply.git_executable(), 'commit', '-q', '--allow-empty', '-F', '-'],
      cwd=worktree, input=base_message(version), text=True,
      capture_output=True, check=True)
  return changed


def base_message(version: str) -> str:
  """The commit message of the export's base (``sync_to_release``)."""
  body = (f'The files of the jax {version} wheel\'s jax/ replace the '
          'checkout\'s, so that the stack after this commit targets the '
          'newest upstream interpreter there is. Upstream main already has '
          'them: submit the commits after this one, each rebased onto main.')
  return (f'Base: jax/ as the jax {version} release ships it (not for '
          f'submission)\n\n{textwrap.fill(body, 72)}\n')


def base_description(head: str, version: str, changed: int) -> str:
  """The Markdown note written beside the export's base commit."""
  return (f'# Base of the stack: jax/ of the jax {version} release\n\n'
          f'Not a pull request. The stack targets upstream\'s newest '
          f'interpreter: the checkout ({head}) is older than jax {version}, '
          f'so this commit replaces its jax/ with the {changed} files that '
          f'the jax {version} wheel ships otherwise (the interpreter and '
          'what it imports; BUILD files and tests stay the checkout\'s). '
          'Apply it first (`git am --keep-non-patch` of every file here, in '
          'order); to send a PR, rebase its commit onto upstream main, which '
          'has these files or newer ones.\n')


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


def _read_text(path: str) -> str | None:
  """Returns the text of file ``path``, or None if it does not exist."""
  try:
    with open(path, encoding='utf-8') as f:
      return f.read()
  except FileNotFoundError:
    return None


def patch_states(series: manifest_lib.Series, wheel_dirs: tuple[str, ...] = ()
                 ) -> list[dict[str, str | None]]:
  """Returns the touched files before the first patch and after each one.

  The files come from the released wheel of the newest version the series
  serves, with the series applied patch by patch.

  Args:
    series: the series.
    wheel_dirs: directories searched for the wheel before the cache.

  Returns:
    ``states[0]`` is the released files, ``states[k]`` the files after the
    first ``k`` patches; each maps a path to its text (None: absent, a
    module a later patch adds).

  Raises:
    PatchDataError: the series does not apply to its own release.
  """
  version = max(series.hashes, key=manifest_lib.version_key)
  wheel = wheels.pristine_wheel(version, wheel_dirs)
  with tempfile.TemporaryDirectory(prefix='export-states-') as tmp:
    wheels.extract(wheel, series.files, tmp)

    def snapshot() -> dict[str, str | None]:
      return {f: _read_text(os.path.join(tmp, f)) for f in series.files}

    states = [snapshot()]
    for patch in series.patches:
      ok, output = gitapply.try_apply(patch.path, tmp, check_only=False)
      if not ok:
        raise errors.PatchDataError(
            f'{patch.name} does not apply to jax {version}:\n{output}')
      states.append(snapshot())
  return states


def merge_patch(worktree: str, before: dict[str, str | None],
                after: dict[str, str | None],
                patch: manifest_lib.Patch) -> None:
  """Rebases one patch onto the worktree with ``git merge-file``.

  A module the patch adds (``before`` None) is written as the patch has it
  if the checkout has no such file; one it removes (``after`` None) is
  removed if the checkout's is the one the patch removes.

  Raises:
    ConflictError: a file does not merge cleanly; names the patch and file.
  """
  with tempfile.TemporaryDirectory(prefix='export-merge-') as tmp:
    for f in after:
      if before[f] == after[f]:
        continue
      target = os.path.join(worktree, f)
      if before[f] is None or after[f] is None:
        if _read_text(target) != before[f]:
          raise errors.ConflictError(
              f'{patch.name}: {f}, which it '
              f'{"adds" if before[f] is None else "removes"}, is otherwise '
              'in the checkout; rebase the series onto it by hand (python '
              '-m jax_fork fork).')
        if after[f] is None:
          os.remove(target)
        else:
          os.makedirs(os.path.dirname(target), exist_ok=True)
          with open(target, 'w', encoding='utf-8') as fh:
            fh.write(after[f])
        continue
      paths = {}
      for name, text in (('base', before[f]), ('theirs', after[f])):
        paths[name] = os.path.join(tmp, name)
        with open(paths[name], 'w', encoding='utf-8') as fh:
          fh.write(text)
      proc = subprocess.run(
          [gitapply.git_executable(), 'merge-file', '-p', '-q',
           target, paths['base'], paths['theirs']],
          capture_output=True, text=True, check=False)
      if proc.returncode:
        raise errors.ConflictError(
            f'{patch.name}: {f} does not merge cleanly onto the '
            f'checkout ({proc.returncode} conflict(s)); rebase the series '
            'onto it by hand (python -m jax_fork fork).')
      with open(target, 'w', encoding='utf-8') as fh:
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

  Every method but ``setUp``/``tearDown`` (and their class forms) and those
  marked ``OLDER_RELEASES_ONLY``, with its decorators and the comment lines
  right above it, without the code fenced for older releases
  (``for_jax_head``).

  Args:
    source: a test file of this repository.
    class_name: the class in it.

  Returns:
    ``(name, text)`` per method, in the file's order; ``text`` ends with a
    newline and is indented as a method.

  Raises:
    PatchDataError: the file has no such class, or it has no test method.
  """
  lines = source.splitlines(keepends=True)
  methods = []
  for node in _class(source, class_name).body:
    if not isinstance(node, ast.FunctionDef) or node.name in (
        'setUp', 'tearDown', 'setUpClass', 'tearDownClass'):
      continue
    start = _comments_above(lines, min(
        [node.lineno] + [d.lineno for d in node.decorator_list]) - 1)
    if any(line.strip().startswith(OLDER_RELEASES_ONLY)
           for line in lines[start:node.lineno]):
      continue
    methods.append((node.name,
                    for_jax_head(''.join(lines[start:node.end_lineno]))))
  if not any(name.startswith('test') for name, _ in methods):
    raise errors.PatchDataError(f'{class_name} has no test method.')
  return methods


def extract_attributes(source: str, class_name: str) -> list[str]:
  """Returns a test class's attribute assignments as upstream gets them.

  Each with the comment lines right above it, indented as in the class (e.g.
  a helper method taken from another test class).

  Raises:
    PatchDataError: the file has no such class.
  """
  lines = source.splitlines(keepends=True)
  out = []
  for node in _class(source, class_name).body:
    if not isinstance(node, (ast.Assign, ast.AnnAssign)):
      continue
    start = _comments_above(lines, node.lineno - 1)
    out.append(for_jax_head(''.join(lines[start:node.end_lineno])))
  return out


def extract_set_up(source: str, class_name: str) -> list[str]:
  """Returns what a test class's ``setUp`` does at jax HEAD but ``super``'s.

  Its lines (indented as in a method body) after the code fenced for older
  releases is dropped and without the ``super().setUp()`` call; none if the
  class has no ``setUp``.
  """
  head = for_jax_head(source)
  lines = head.splitlines(keepends=True)
  for node in _class(head, class_name).body:
    if isinstance(node, ast.FunctionDef) and node.name == 'setUp':
      body = lines[node.body[0].lineno - 1:node.end_lineno]
      return [line for line in body
              if line.strip() and line.strip() != 'super().setUp()']
  return []


def _comments_above(lines: list[str], start: int) -> int:
  """Returns the index of the first comment line right above line ``start``."""
  while start > 0 and lines[start - 1].strip().startswith('#'):
    start -= 1
  return start


def _class(source: str, class_name: str) -> ast.ClassDef:
  classes = [n for n in ast.parse(source).body
             if isinstance(n, ast.ClassDef) and n.name == class_name]
  if not classes:
    raise errors.PatchDataError(f'No test class {class_name}.')
  return classes[0]


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


def add_test_class(upstream_source: str, upstream_class: str | None,
                   name: str,
                   methods: list[tuple[str, str]],
                   imports: dict[str, str],
                   side_effects: list[str] | tuple[str, ...] = (),
                   attributes: list[str] | tuple[str, ...] = (),
                   set_up: list[str] | tuple[str, ...] = ()) -> str:
  """Returns upstream's test file with a test class of ours added at its end.

  The class is ``jtu.JaxTestCase`` with the decorators and the ``setUp`` of
  upstream's class in that file, as upstream's tests run, followed by what
  our ``setUp`` does beyond it, our class's attributes and its methods. It
  goes after the file's last class. It has a ``setUp`` only where upstream's
  class or ours has one that does something.

  Args:
    upstream_source: upstream's test file.
    upstream_class: its test class whose decorators and ``setUp`` the new
      class takes, or None for none.
    name: the new class's name.
    methods: ``(name, text)`` of each method (``extract_methods``).
    imports: the import lines of our test file (``import_lines``).
    side_effects: the lines of our test file's imports made for their side
      effects (``side_effect_imports``); each that upstream's file lacks is
      added.
    attributes: the class's attribute assignments (``extract_attributes``).
    set_up: the lines our ``setUp`` adds (``extract_set_up``).

  Raises:
    PatchDataError: upstream's class is missing, the file already has a
      class of that name, or a method or attribute uses a name that neither
      upstream's file nor an import of our file provides.
  """
  tree = ast.parse(upstream_source)
  classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
  base = [n for n in classes if n.name == upstream_class]
  if upstream_class is not None and not base:
    raise errors.PatchDataError(
        f'Upstream has no test class {upstream_class}.')
  if name in {n.name for n in classes}:
    raise errors.PatchDataError(
        f'Upstream\'s test file already has a class {name}; rename ours.')
  lines = upstream_source.splitlines(keepends=True)
  header = ''.join(f'@{ast.get_source_segment(upstream_source, d)}\n'
                   for b in base for d in b.decorator_list)
  set_ups = [n for b in base for n in b.body
             if isinstance(n, ast.FunctionDef) and n.name == 'setUp']
  upstream_set_up = '  def setUp(self):\n    super().setUp()\n'
  if set_ups:
    upstream_set_up = ''.join(
        lines[set_ups[0].lineno - 1:set_ups[0].end_lineno])
  available = module_names(upstream_source)
  needed = set()
  for item, text in [*methods, *(('attributes', a) for a in attributes),
                     ('setUp', '  def setUp(self):\n' + ''.join(set_up)
                      + '    pass\n')]:
    missing = free_names(text) - available - {name}
    unknown = sorted(missing - set(imports))
    if unknown:
      raise errors.PatchDataError(
          f'{name}.{item} uses {", ".join(unknown)}, which upstream\'s test '
          'file lacks; use upstream\'s names (or fence the code for older '
          'releases).')
    needed |= missing
  body = ([upstream_set_up.rstrip('\n') + '\n' + ''.join(set_up)]
          if set_ups or set_up else [])
  body += list(attributes)
  body += [text for _, text in methods]
  text = (f'\n\n{header}class {name}(jtu.JaxTestCase):\n\n'
          + '\n'.join(body))
  end = max(n.end_lineno for n in classes)
  lines[end:end] = [text]
  source = ''.join(lines)
  for missing in sorted(needed):
    source = add_import(source, imports[missing])
  for line in side_effects:
    if line.split('  #')[0] not in source:
      source = add_import(source, line)
  return source


DEP3_FIELDS = ('Description', 'Origin', 'Forwarded', 'Applied-Upstream',
               'Last-Update', 'Bug', 'Author', 'Reviewed-by')


def commit_message(patch: manifest_lib.Patch, summary: str = '') -> str:
  """Returns the exported commit message of a series patch.

  Args:
    patch: the patch.
    summary: the change's summary (``Change.summary``): the message is the
      patch's subject and the summary, wrapped at 72 columns, as upstream's
      commit messages are short. Without one, the patch's own message
      without its DEP-3 header.
  """
  if summary:
    return (f'{patch.subject}\n\n'
            + textwrap.fill(' '.join(summary.split()), 72,
                            break_on_hyphens=False, break_long_words=False)
            + '\n')
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
                   change: Change, tested: list[str] | None,
                   base: str = 'upstream main') -> str:
  """Returns the pull request description of one exported commit.

  Args:
    message: the commit message.
    number: the commit's place in the stack (1-based).
    total: the number of commits in the stack.
    stat: ``git show --stat`` of the commit.
    tests: ``(file, class, method names)`` of the tests it adds; the
      description lists the methods whose names start with ``test``.
    change: the change.
    tested: lines that say how it was tested, or None if not measured.
    base: what the first commit applies on.
  """
  subject, _, body = message.partition('\n\n')
  depends = (f'It applies on {base}.' if number == 1 else
             f'It is stacked on PR {number - 1} of {total} of this series '
             '(send them in order).')
  added = ''.join(  # The test methods, not the class's helpers.
      f'- `{cls}` in `{file}`: '
      + ', '.join(f'`{m}`' for m in methods if m.startswith('test')) + '\n'
      for file, cls, methods in tests)
  how = '\n'.join(tested) if tested else (
      'Not measured: this export ran without `--test_python`, so it claims '
      'no results. To measure, run in the checkout, with the jaxlib that '
      'its `jax/version.py` names installed, without and with the first '
      f'{number} commit(s) of this stack (`git am --keep-non-patch`):\n\n'
      + ''.join(f'    {pytest_runs.command_line(args)}\n'
                for args in pytest_runs.TPU_COMMANDS)
      + ''.join(f'    {pytest_runs.command_line((file,))}\n'
                for file in dict.fromkeys(
                    file for file, _, _ in tests
                    if os.path.dirname(file) != TEST_DIR))
      + '\nand the same for each other '
      f'`{pytest_runs.OTHER_PATTERN}` (the GPU interpreter\'s tests).')
  return (f'# {subject}\n\nPR {number} of {total}. {depends}\n\n'
          f'## What and why\n\n{body.strip()}\n\n'
          + (f'{change.notes}\n\n' if change.notes else '') +
          f'## Changes\n\n```\n{stat.strip(chr(10))}\n```\n\n'
          f'Tests added (a class per change):\n\n{added}\n'
          f'## How it was tested\n\n{how}\n')


def export(jax_repo: str, out_dir: str, tests_dir: str,
           manifest: manifest_lib.Manifest,
           series_name: str | None = None,
           test_python: str | None = None,
           base_release: str | None = None) -> list[str]:
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
    base_release: a release the manifest serves, newer than the checkout
      (``newest_release``), or None (the default) to export onto the
      checkout's HEAD: the stack then goes on a first commit that gives
      ``jax/`` as that release ships it (``sync_to_release``), written as
      ``0000-base-jax-<version>.patch`` with a note that it is not for
      submission, and the series is chosen against it.

  Returns:
    The paths of the patch files, to ``git am`` in order (the base first,
    if any).

  Raises:
    EnvironmentProblem: ``jax_repo`` is not a git checkout of jax.
    UsageError: git has no user identity to author the commits.
    ConflictError: no series applies exactly, and the three-way rebase of
      the newest series onto the checkout conflicts.
    PatchDataError: a test class or upstream's test file is not as expected
      (see ``add_test_class``), a new import's Bazel dep cannot be added (see
      ``bazel_deps.update_build_files``), or a patch has no ``CHANGES``
      entry (see ``changes_by_subject``).
    UsageError: ``test_python`` is not an executable, or ``base_release``
      is not a release the manifest serves.
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
  if (base_release is not None
      and manifest.series_for(base_release) is None):
    raise errors.UsageError(manifest.not_served_message(base_release))
  by_subject = changes_by_subject(manifest)
  written = []
  work = tempfile.mkdtemp(prefix='export-upstream-')
  worktree = os.path.join(work, 'jax')
  staged = os.path.join(work, 'out')
  os.makedirs(staged)
  upstream_tests = sorted({t.upstream[0] for c in CHANGES for t in c.tests})
  # Only jax/ (the files the export touches, and the modules and BUILD
  # files the Bazel deps are found in), tests/pallas/ and the other test files
  # that get our tests are checked out; the index holds the rest of HEAD, so
  # the commits change nothing else.
  _git(['worktree', 'add', '--detach', '--no-checkout', worktree, 'HEAD'],
       jax_repo)
  try:
    _git(['read-tree', 'HEAD'], worktree)
    others = [t for t in upstream_tests if os.path.dirname(t) != TEST_DIR]
    builds = [os.path.join(os.path.dirname(t), b)
              for t in others for b in bazel_deps.BUILD_FILES]
    paths = ['jax', TEST_DIR, *others, *(
        b for b in builds if _git(['ls-files', '--', b], worktree).strip())]
    if test_python:
      # What pytest reads: upstream's settings and conftest.
      paths += [p for p in ('pyproject.toml', 'conftest.py') if _git(
          ['ls-files', '--', p], worktree).strip()]
    _git(['checkout', 'HEAD', '--', *paths], worktree)
    head = _git(['rev-parse', '--short', 'HEAD'], worktree).strip()
    base = None
    if base_release is not None:
      changed = sync_to_release(worktree, base_release, manifest)
      written.append(_git(
          ['format-patch', '-1', '--binary', '--zero-commit',
           '--no-signature', '--start-number=0', '-o', staged, 'HEAD'],
          worktree).strip())
      base = (written[-1], base_description(head, base_release, changed))
    states = None
    try:
      series = choose_series(manifest, worktree, series_name)
    except errors.ConflictError as exact_failure:
      series = (manifest.series[series_name] if series_name is not None
                else nearest_series(manifest, checkout_version(worktree)))
      states = patch_states(series)
      logging.info('%s\nRebasing %s onto the checkout with three-way '
                   'merges.', exact_failure, series.name)
    patches = series.patches
    series_changes = [_change_of(by_subject, series, p) for p in patches]
    if test_python:
      base_runs = _measure(worktree, test_python, pytest_runs.TPU_COMMANDS)
      others = pytest_runs.other_commands(worktree)
      base_others = _measure(worktree, test_python, others)
    descriptions = []
    for number, patch in enumerate(patches, start=1):
      change = series_changes[number - 1]
      touched = [*series.files, *upstream_tests]
      before = {f: _read_text(os.path.join(worktree, f)) for f in touched}
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
        _rewrite(os.path.join(worktree, target), lambda s, c=cls, t=test,
                 m=methods, o=ours: add_test_class(
                     s, c, t.name, m, import_lines(o), side_effect_imports(o),
                     extract_attributes(o, t.name), extract_set_up(o, t.name)))
        added.append((target, test.name, [n for n, _ in methods]))
      builds = bazel_deps.update_build_files(worktree, before)
      # A module a later patch adds is not there yet.
      _git(['add', '--', *(f for f in touched if before[f] is not None
                           or os.path.exists(os.path.join(worktree, f))),
            *builds], worktree)
      message = commit_message(patch, change.summary)
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
    on = (f'upstream {head}' if base is None else
          f'upstream {head} with jax/ of the jax {base_release} release '
          f'(the base commit, {os.path.basename(base[0])})')
    if test_python:
      top_others = _measure(worktree, test_python, others)
      setting = (f'On {on} (CPU, '
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
                               added, change, how, base=on))
    if base is not None:
      with open(base[0][:-len('.patch')] + '.md', 'w', encoding='utf-8') as f:
        f.write(base[1])
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
