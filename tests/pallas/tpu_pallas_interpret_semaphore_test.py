# Copyright 2026 The JAX Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Tests for semaphores in TPU interpret mode.

Covers non-decrementing waits (`pl.semaphore_wait(..., decrement=False)`),
`pl.semaphore_read` and local signals on multi-core meshes.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import contextlib
import io

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util
from tpu_interpret_test_util import mosaic_interpret


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretLocalSignalTest(test_util.InterpretTestCase):
  """Tests of `pl.semaphore_signal` without `core_index` (patch 0001)."""

  def _core_kernel(self, num_cores, out_type, **params):
    """Returns `pl.kernel` over a mesh of `num_cores` TensorCores.

    The kernel body gets its operands' refs, the output ref, an `(8, 128)`
    VMEM buffer of the output's dtype and a REGULAR semaphore.

    Args:
      num_cores: The number of cores.
      out_type: The output's `jax.ShapeDtypeStruct`.
      **params: Fields of `InterpretParams`.

    Returns:
      A decorator for the kernel body.
    """
    return test_util.kernel(
        out_type=out_type,
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=num_cores),
        scratch_types=[
            pltpu.VMEM((8, 128), out_type.dtype),
            pltpu.SemaphoreType.REGULAR,
        ],
        interpret=test_util.interpret_params(on_race='warn', **params),
    )

  def test_local_signal_targets_calling_core(self):
    @self._core_kernel(2, jax.ShapeDtypeStruct((2, 8, 128), jnp.float32))
    def kernel(o_ref, vmem_ref, sem):
      core = jax.lax.axis_index('core')
      # Without a `core_index`, each core signals its own semaphore.
      pl.semaphore_signal(sem, 1)
      pl.semaphore_wait(sem, 1)
      vmem_ref[...] = jnp.full((8, 128), core + 1, jnp.float32)
      pltpu.sync_copy(vmem_ref, o_ref.at[core])

    out = jax.block_until_ready(kernel())
    np.testing.assert_array_equal(
        out, np.broadcast_to(np.array([1.0, 2.0])[:, None, None], out.shape)
    )


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSemaphoreReadTest(test_util.InterpretTestCase):
  """Tests of `pl.semaphore_read` (patch 0002)."""

  def test_signal_read_wait_read(self):
    def kernel(o_ref, sem):
      pl.semaphore_signal(sem, 3)
      o_ref[0] = pl.semaphore_read(sem)
      pl.semaphore_wait(sem, 3)
      o_ref[1] = pl.semaphore_read(sem)

    out = jax.block_until_ready(
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((2,), jnp.int32),
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            interpret=test_util.interpret_params(),
        )()
    )
    np.testing.assert_array_equal(out, [3, 0])

  def test_semaphore_read_of_array_views(self):
    def kernel(o_ref, sems):
      for i in range(4):
        pl.semaphore_signal(sems.at[i], i + 1)
      for i in range(4):
        o_ref[i] = pl.semaphore_read(sems.at[i])
      for i in range(4):
        pl.semaphore_wait(sems.at[i], i + 1)
      o_ref[4] = sum(pl.semaphore_read(sems.at[i]) for i in range(4))

    out = jax.block_until_ready(
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((5,), jnp.int32),
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR((4,))],
            interpret=test_util.interpret_params(),
        )()
    )
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 0])

  @parameterized.parameters('on_wait', 'eager')
  def test_semaphore_read_polls_dma_to_completion(self, dma_execution_mode):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)

    def kernel(x_ref, o_ref, polls_ref, vmem_ref, sem):
      copy = pltpu.make_async_copy(x_ref, vmem_ref, sem)
      copy.start()
      # Poll the DMA semaphore until the copy signals it. The bound on the
      # number of polls makes a read that never sees the copy fail the test
      # instead of spinning forever.
      polls_ref[0] = jax.lax.while_loop(
          lambda polls: (pl.semaphore_read(sem) == 0) & (polls < 100),
          lambda polls: polls + 1,
          jnp.int32(0),
      )
      copy.wait()
      o_ref[...] = vmem_ref[...]

    out, polls = jax.block_until_ready(
        pl.pallas_call(
            kernel,
            out_shape=(
                jax.ShapeDtypeStruct((8, 128), jnp.float32),
                jax.ShapeDtypeStruct((1,), jnp.int32),
            ),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=(
                pl.BlockSpec(memory_space=pltpu.VMEM),
                pl.BlockSpec(memory_space=pltpu.SMEM),
            ),
            scratch_shapes=[
                pltpu.VMEM((8, 128), jnp.float32),
                pltpu.SemaphoreType.DMA,
            ],
            interpret=test_util.interpret_params(
                dma_execution_mode=dma_execution_mode, detect_races=True,
                on_race='warn'
            ),
        )(x)
    )
    self.assertLess(polls[0], 100)
    np.testing.assert_array_equal(out, x)
    self.assertFalse(mosaic_interpret.races.races_found)


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretNonDecrementingWaitTest(test_util.InterpretTestCase):
  """Tests of `pl.semaphore_wait(..., decrement=False)` (patch 0003)."""

  # The kernel of InterpretLocalSignalTest's tests.
  _core_kernel = InterpretLocalSignalTest._core_kernel

  @parameterized.parameters(False, True)
  def test_nondecrementing_wait_leaves_count(self, detect_races):
    num_iterations = 5

    def kernel(o_ref, sem):
      # Before any signal, a wait for 0 returns at once.
      pl.semaphore_wait(sem, 0, decrement=False)
      o_ref[0] = pl.semaphore_read(sem)

      def body(i, total):
        pl.semaphore_signal(sem, 1)
        # The count is i + 1 here; a wait for any value up to it returns and
        # leaves the count.
        pl.semaphore_wait(sem, i + 1, decrement=False)

        @pl.when(i % 2 == 0)
        def _():
          pl.semaphore_wait(sem, 1, decrement=False)

        pl.semaphore_wait(sem, 0, decrement=False)
        return total + pl.semaphore_read(sem)

      o_ref[1] = jax.lax.fori_loop(0, num_iterations, body, jnp.int32(0))
      pl.semaphore_wait(sem, num_iterations)
      o_ref[2] = pl.semaphore_read(sem)

    out = jax.block_until_ready(
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((3,), jnp.int32),
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            interpret=test_util.interpret_params(
                allow_non_decrementing_semaphore_wait=True,
                detect_races=detect_races,
                on_race='warn',
            ),
        )()
    )
    # The count is 1, 2, ..., num_iterations after each iteration's signal.
    np.testing.assert_array_equal(
        out, [0, sum(range(1, num_iterations + 1)), 0]
    )

  def test_nondecrementing_wait_needs_allow_flag(self):
    def kernel(o_ref, sem):
      pl.semaphore_signal(sem, 1)
      pl.semaphore_wait(sem, 1, decrement=False)
      pl.semaphore_wait(sem, 1)
      o_ref[0] = jnp.int32(1)

    with self.assertRaisesRegex(
        NotImplementedError,
        r'not supported by the Mosaic TPU compiler.*'
        r'InterpretParams\(allow_non_decrementing_semaphore_wait=True\)',
    ):
      pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
          out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
          scratch_shapes=[pltpu.SemaphoreType.REGULAR],
          interpret=test_util.interpret_params(),
      )()

  @parameterized.parameters(False, True)
  def test_nondecrementing_wait_reported_count_at_exit(self, drain):
    # The interpreter reports a semaphore left with a non-zero count when the
    # kernel ends. Non-decrementing waits must leave the count for it.
    def kernel(o_ref, sem):
      pl.semaphore_signal(sem, 2)
      pl.semaphore_wait(sem, 2, decrement=False)
      pl.semaphore_wait(sem, 1, decrement=False)
      pl.semaphore_wait(sem, 0, decrement=False)
      if drain:
        pl.semaphore_wait(sem, 2)
      o_ref[0] = jnp.int32(1)

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
      out = jax.block_until_ready(
          pl.pallas_call(
              kernel,
              out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
              out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
              scratch_shapes=[pltpu.SemaphoreType.REGULAR],
              interpret=test_util.interpret_params(
                  allow_non_decrementing_semaphore_wait=True
              ),
          )()
      )
    np.testing.assert_array_equal(out, [1])
    if drain:
      self.assertNotIn('non-zero count', stdout.getvalue())
    else:
      self.assertRegex(
          stdout.getvalue(), r'non-zero count .* at kernel exit: 2'
      )

  @parameterized.parameters(1, 2, 4)
  def test_nondecrementing_wait_flag_across_cores(self, num_cores):
    # Core 0 raises a flag on every core; each core polls it twice without
    # consuming it, records the count it sees, and then consumes it.
    @self._core_kernel(
        num_cores,
        jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.int32),
        allow_non_decrementing_semaphore_wait=True,
    )
    def kernel(o_ref, vmem_ref, sem):
      core = jax.lax.axis_index('core')

      @pl.when(core == 0)
      def _():
        for i in range(num_cores):
          pl.semaphore_signal(sem, 1, core_index=i)

      pl.semaphore_wait(sem, 1, decrement=False)
      pl.semaphore_wait(sem, 1, decrement=False)
      seen = pl.semaphore_read(sem)
      pl.semaphore_wait(sem, 1)
      left = pl.semaphore_read(sem)
      vmem_ref[...] = jnp.full((8, 128), 100 * core + 10 * seen + left)
      pltpu.sync_copy(vmem_ref, o_ref.at[core])

    out = jax.block_until_ready(kernel())
    # Each core saw a count of 1 twice, and 0 after consuming it.
    expected = 100 * np.arange(num_cores) + 10
    np.testing.assert_array_equal(out[:, 0, 0], expected)
    np.testing.assert_array_equal(
        out, np.broadcast_to(expected[:, None, None], out.shape)
    )

  @parameterized.parameters(False, True)
  def test_nondecrementing_wait_orders_accesses_for_race_detection(
      self, wait_before_read
  ):
    # Core 1 writes a shared HBM buffer and then signals core 0, which reads
    # the buffer. The non-decrementing wait orders the write before the read;
    # without it, race detection must report a race.
    @self._core_kernel(
        2,
        jax.ShapeDtypeStruct((8, 128), jnp.float32),
        allow_non_decrementing_semaphore_wait=True,
        detect_races=True,
    )
    def kernel(x_ref, o_ref, vmem_ref, sem):
      core = jax.lax.axis_index('core')

      @pl.when(core == 1)
      def _():
        pltpu.sync_copy(x_ref, o_ref)
        pl.semaphore_signal(sem, 1, core_index=0)

      @pl.when(core == 0)
      def _():
        if wait_before_read:
          pl.semaphore_wait(sem, 1, decrement=False)
        pltpu.sync_copy(o_ref, vmem_ref)
        pl.semaphore_wait(sem, 1)

    x = jnp.ones((8, 128), jnp.float32)
    out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, x)
    self.assertEqual(mosaic_interpret.races.races_found, not wait_before_read)

  def test_nondecrementing_wait_does_not_hang_after_exception(self):
    @self._core_kernel(
        2,
        jax.ShapeDtypeStruct((8, 128), jnp.float32),
        allow_non_decrementing_semaphore_wait=True,
    )
    def kernel(x_ref, o_ref, vmem_ref, sem):
      core_index = jax.lax.axis_index('core')

      @pl.when(core_index == 1)
      def _():
        # Out-of-bounds read: core 1 fails before it signals.
        t = vmem_ref[100, 0]
        vmem_ref[100, 0] = t
        pl.semaphore_signal(sem, 1, core_index=0)

      @pl.when(core_index == 0)
      def _():
        # This wait is never satisfied, as core 1 raises before signalling.
        pl.semaphore_wait(sem, 1, decrement=False)
        pltpu.sync_copy(x_ref, o_ref)

    x = jnp.ones((8, 128), dtype=jnp.float32)
    with self.assertRaises(jax.errors.JaxRuntimeError):
      kernel(x).block_until_ready()
    pltpu.reset_tpu_interpret_mode_state()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
