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

"""Tests for `run_scoped` with `collective_axes` in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

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

_SHAPE = (8, 128)


def _per_core_output(num_cores: int, dtype=jnp.float32):
  return jax.ShapeDtypeStruct((num_cores, *_SHAPE), dtype)


def _share_from_core_1(x_ref, o_ref):
  """Shares `x_ref` through a collective scratch buffer on a 2-core mesh.

  Core 1 copies `x_ref` into the collectively allocated VMEM buffer and
  signals core 0 on the collectively allocated semaphore; then each core
  copies the buffer to its row of `o_ref`.

  Args:
    x_ref: The input, f32[8, 128] in HBM.
    o_ref: The output, f32[2, 8, 128] in HBM, a row per core.
  """
  core = jax.lax.axis_index('core')

  def body(buffer_ref, sem):
    @pl.when(core == 1)
    def _():
      pltpu.sync_copy(x_ref, buffer_ref)
      pl.semaphore_signal(sem, 1, core_index=0)

    @pl.when(core == 0)
    def _():
      pl.semaphore_wait(sem, 1)

    pltpu.sync_copy(buffer_ref, o_ref.at[core])

  pl.run_scoped(
      body,
      pltpu.VMEM(_SHAPE, jnp.float32),
      pltpu.SemaphoreType.REGULAR,
      collective_axes='core',
  )


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretCollectiveRunScopedTest(jtu.JaxTestCase):

  def setUp(self):
    super().setUp()

    if not jtu.test_device_matches(['cpu']):
      self.skipTest('CPU-only test')

    if jax.device_count() > 1:
      # Workaround for https://github.com/jax-ml/jax/issues/25671
      self.skipTest(f'requires 1 device, found {jax.device_count()}')

  def _copy_from_one_core_kernel(self, num_cores, collective, **params):
    """Core `num_cores - 1` fills a scope's buffer; every core copies it out."""
    mesh = test_util.tensorcore_mesh('core', num_cores)
    last = num_cores - 1

    @test_util.kernel(
        out_type=_per_core_output(num_cores),
        mesh=mesh,
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            **params,
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref, sem, dma_sem):
        @pl.when(core == last)
        def _():
          pltpu.async_copy(x_ref, buffer_ref, dma_sem).wait()
          for i in range(num_cores):
            pl.semaphore_signal(sem, 1, core_index=i)

        pl.semaphore_wait(sem, 1)
        pltpu.sync_copy(buffer_ref, o_ref.at[core])

      pl.run_scoped(
          body,
          pltpu.VMEM(_SHAPE, jnp.float32),
          pltpu.SemaphoreType.REGULAR,
          pltpu.SemaphoreType.DMA,
          collective_axes='core' if collective else (),
      )

    return kernel

  @parameterized.product(
      num_cores=[1, 2, 4],
      dma_execution_mode=['eager', 'on_wait'],
      detect_races=[False, True],
  )
  def test_collective_scope_shares_buffer_and_semaphore(
      self, num_cores, dma_execution_mode, detect_races
  ):
    kernel = self._copy_from_one_core_kernel(
        num_cores,
        collective=True,
        dma_execution_mode=dma_execution_mode,
        detect_races=detect_races,
    )
    x = jnp.arange(np.prod(_SHAPE), dtype=jnp.float32).reshape(_SHAPE)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, np.broadcast_to(x, out.shape))
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  def test_collective_vmem_scratch_two_cores(self):
    # Core 1 copies an input of 7.0 into the collective scratch and signals
    # core 0 on the collective semaphore; both cores copy the scratch out.
    @test_util.kernel(
        out_type=_per_core_output(2),
        mesh=test_util.tensorcore_mesh('core', 2),
        interpret=pltpu.InterpretParams(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            uninitialized_memory='zero',
        ),
    )
    def kernel(x_ref, o_ref):
      _share_from_core_1(x_ref, o_ref)

    x = jnp.full(_SHAPE, 7.0, jnp.float32)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, np.full((2, *_SHAPE), 7.0))

  def test_private_scope_stays_private(self):
    # The same kernel with a private scope: only the last core's copy of the
    # scratch is filled, so core 0 copies out its own zero-initialized scratch.
    # The private semaphore of each core is signalled by the last core.
    kernel = self._copy_from_one_core_kernel(
        2, collective=False, uninitialized_memory='zero'
    )
    x = jnp.full(_SHAPE, 7.0, jnp.float32)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out[0], np.zeros(_SHAPE))
    np.testing.assert_array_equal(out[1], x)

  @parameterized.parameters(False, True)
  def test_collective_axis_of_size_one_is_like_private(self, collective):
    kernel = self._copy_from_one_core_kernel(
        1, collective=collective, uninitialized_memory='zero'
    )
    x = jnp.full(_SHAPE, 3.0, jnp.float32)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, x[None])

  @parameterized.parameters('vmem', 'smem', 'hbm')
  def test_collective_scope_in_memory_space(self, memory_space):
    # Core 0 writes its index plus one into the collective buffer; core 1
    # reads it after a semaphore, in every memory space.
    num_cores = 2
    allocate = {
        'vmem': pltpu.VMEM(_SHAPE, jnp.int32),
        'smem': pltpu.SMEM((8,), jnp.int32),
        'hbm': pltpu.HBM(_SHAPE, jnp.int32),
    }[memory_space]

    @test_util.kernel(
        out_type=_per_core_output(num_cores, jnp.int32),
        mesh=test_util.tensorcore_mesh('core', num_cores),
        scratch_types=[pltpu.VMEM(_SHAPE, jnp.int32)],
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            allow_hbm_allocation_in_run_scoped=True
        ),
    )
    def kernel(x_ref, o_ref, vmem_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref, sem):
        @pl.when(core == 0)
        def _():
          if memory_space == 'smem':
            for i in range(8):
              buffer_ref[i] = jnp.int32(42 + i)
          else:
            pltpu.sync_copy(x_ref, buffer_ref)
          pl.semaphore_signal(sem, 1, core_index=1)

        @pl.when(core == 1)
        def _():
          pl.semaphore_wait(sem, 1)

        if memory_space == 'smem':
          vmem_ref[...] = jnp.full(_SHAPE, buffer_ref[core + 2])
        else:
          pltpu.sync_copy(buffer_ref, vmem_ref)
        pltpu.sync_copy(vmem_ref, o_ref.at[core])

      pl.run_scoped(
          body, allocate, pltpu.SemaphoreType.REGULAR, collective_axes='core'
      )

    x = jnp.arange(np.prod(_SHAPE), dtype=jnp.int32).reshape(_SHAPE)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    if memory_space == 'smem':
      expected = np.stack([np.full(_SHAPE, 44), np.full(_SHAPE, 45)])
    else:
      expected = np.stack([x, x])
    np.testing.assert_array_equal(out, expected)

  def test_nested_and_looped_collective_scopes(self):
    # An outer collective scope holds a table that core 0 fills once. In each
    # iteration of a loop, an inner collective scope holds a buffer that core 0
    # sets to (i + 1) * table, and every core adds it to its accumulator.
    num_cores, num_iterations = 4, 3

    @test_util.kernel(
        out_type=_per_core_output(num_cores),
        mesh=test_util.tensorcore_mesh('core', num_cores),
        scratch_types=[pltpu.VMEM(_SHAPE, jnp.float32)],
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            detect_races=True,
        ),
    )
    def kernel(x_ref, o_ref, acc_ref):
      core = jax.lax.axis_index('core')
      acc_ref[...] = jnp.zeros(_SHAPE, jnp.float32)

      def publish(sem):
        # Core 0 raises a flag for every core of the shared count; each core
        # polls it and then consumes its share, so the count ends at zero.
        @pl.when(core == 0)
        def _():
          pl.semaphore_signal(sem, num_cores)

        pl.semaphore_wait(sem, 1, decrement=False)
        pl.semaphore_wait(sem, 1)

      def outer(table_ref, table_sem):
        @pl.when(core == 0)
        def _():
          pltpu.sync_copy(x_ref, table_ref)

        publish(table_sem)

        def step(i, carry):
          def inner(buffer_ref, sem):
            @pl.when(core == 0)
            def _():
              buffer_ref[...] = table_ref[...] * (i + 1).astype(jnp.float32)

            publish(sem)
            acc_ref[...] += buffer_ref[...]

          pl.run_scoped(
              inner,
              pltpu.VMEM(_SHAPE, jnp.float32),
              pltpu.SemaphoreType.REGULAR,
              collective_axes='core',
          )
          return carry

        jax.lax.fori_loop(0, num_iterations, step, 0)

      pl.run_scoped(
          outer,
          pltpu.VMEM(_SHAPE, jnp.float32),
          pltpu.SemaphoreType.REGULAR,
          collective_axes='core',
      )
      pltpu.sync_copy(acc_ref, o_ref.at[core])

    x = jnp.arange(np.prod(_SHAPE), dtype=jnp.float32).reshape(_SHAPE)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    expected = np.asarray(x) * sum(range(1, num_iterations + 1))
    np.testing.assert_array_equal(out, np.broadcast_to(expected, out.shape))
    self.assertFalse(mosaic_interpret.races.races_found)

  def test_collective_after_divergent_private_allocation(self):
    # Core 0 makes two private allocations that the other cores do not make;
    # the collective allocation that follows must still be shared.
    num_cores = 2

    @test_util.kernel(
        out_type=_per_core_output(num_cores),
        mesh=test_util.tensorcore_mesh('core', num_cores),
        interpret=pltpu.InterpretParams(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      @pl.when(core == 0)
      def _():
        def private(scratch_ref, sem):
          scratch_ref[...] = jnp.zeros(_SHAPE, jnp.float32)
          pl.semaphore_signal(sem, 1)
          pl.semaphore_wait(sem, 1)

        pl.run_scoped(
            private,
            pltpu.VMEM(_SHAPE, jnp.float32),
            pltpu.SemaphoreType.REGULAR,
        )

      _share_from_core_1(x_ref, o_ref)

    x = jnp.full(_SHAPE, 5.0, jnp.float32)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, np.full((num_cores, *_SHAPE), 5.0))

  @parameterized.parameters(False, True)
  def test_collective_buffer_race_detection(self, synchronized):
    # Both cores write the collective buffer. Ordered by the collective
    # semaphore, the writes do not race; unordered, they do.
    num_cores = 2

    @test_util.kernel(
        out_type=_per_core_output(num_cores),
        mesh=test_util.tensorcore_mesh('core', num_cores),
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            detect_races=True,
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref, sem):
        if synchronized:
          @pl.when(core == 1)
          def _():
            pl.semaphore_wait(sem, 1)

        pltpu.sync_copy(x_ref, buffer_ref)
        pltpu.sync_copy(buffer_ref, o_ref.at[core])

        @pl.when(core == 0)
        def _():
          pl.semaphore_signal(sem, 1, core_index=1)

        if not synchronized:
          @pl.when(core == 1)
          def _():
            pl.semaphore_wait(sem, 1)

      pl.run_scoped(
          body,
          pltpu.VMEM(_SHAPE, jnp.float32),
          pltpu.SemaphoreType.REGULAR,
          collective_axes='core',
      )

    x = jnp.ones(_SHAPE, jnp.float32)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, np.ones((num_cores, *_SHAPE)))
    self.assertEqual(mosaic_interpret.races.races_found, not synchronized)

  @parameterized.parameters(1, 2, 4)
  def test_shared_table_with_nondecrementing_wait(self, num_cores):
    # Every core writes its row of a collective buffer and signals the
    # collective semaphore; then each waits, without consuming the count,
    # until all cores have signalled, and reads the whole buffer.
    rows_per_core = 8
    table_shape = (num_cores * rows_per_core, 128)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((num_cores, *table_shape), jnp.float32),
        mesh=test_util.tensorcore_mesh('core', num_cores),
        scratch_types=[pltpu.VMEM((rows_per_core, 128), jnp.float32)],
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            detect_races=True,
        ),
    )
    def kernel(x_ref, o_ref, row_ref):
      core = jax.lax.axis_index('core')

      def body(table_ref, sem, done_sem):
        rows = pl.ds(core * rows_per_core, rows_per_core)
        pltpu.sync_copy(x_ref.at[rows], row_ref)
        row_ref[...] = row_ref[...] * 2.0 + core.astype(jnp.float32)
        pltpu.sync_copy(row_ref, table_ref.at[rows])
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, num_cores, decrement=False)
        pltpu.sync_copy(table_ref, o_ref.at[core])
        # Once every core is past its wait, core 0 drains both counts.
        pl.semaphore_signal(done_sem, 1)

        @pl.when(core == 0)
        def _():
          pl.semaphore_wait(done_sem, num_cores)
          pl.semaphore_wait(sem, num_cores)

      pl.run_scoped(
          body,
          pltpu.VMEM(table_shape, jnp.float32),
          pltpu.SemaphoreType.REGULAR,
          pltpu.SemaphoreType.REGULAR,
          collective_axes='core',
      )

    x = jax.random.normal(jax.random.key(0), table_shape, jnp.float32)
    with test_util.fail_instead_of_hanging():
      out = jax.block_until_ready(kernel(x))
    expected = np.asarray(x) * 2.0 + np.repeat(
        np.arange(num_cores, dtype=np.float32), rows_per_core
    )[:, None]
    np.testing.assert_array_equal(out, np.broadcast_to(expected, out.shape))
    self.assertFalse(mosaic_interpret.races.races_found)

  def test_collective_scope_needs_allow_flag(self):
    @test_util.kernel(
        out_type=_per_core_output(2),
        mesh=test_util.tensorcore_mesh('core', 2),
        interpret=pltpu.InterpretParams(),
    )
    def kernel(x_ref, o_ref):
      def body(buffer_ref):
        pltpu.sync_copy(x_ref, buffer_ref)
        pltpu.sync_copy(buffer_ref, o_ref.at[jax.lax.axis_index('core')])

      pl.run_scoped(
          body, pltpu.VMEM(_SHAPE, jnp.float32), collective_axes='core'
      )

    with self.assertRaisesRegex(
        NotImplementedError,
        r'not supported by the Mosaic TPU compiler.*'
        r'InterpretParams\(allow_collective_axes_in_run_scoped=True\)',
    ):
      kernel(jnp.ones(_SHAPE, jnp.float32))

  def test_axis_not_in_scope_raises(self):
    @test_util.kernel(
        out_type=_per_core_output(2),
        mesh=test_util.tensorcore_mesh('core', 2),
        interpret=pltpu.InterpretParams(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
        ),
    )
    def kernel(x_ref, o_ref):
      def body(buffer_ref):
        pltpu.sync_copy(x_ref, buffer_ref)
        pltpu.sync_copy(buffer_ref, o_ref.at[jax.lax.axis_index('core')])

      pl.run_scoped(
          body, pltpu.VMEM(_SHAPE, jnp.float32), collective_axes='rows'
      )

    with self.assertRaisesRegex(
        ValueError,
        r"'rows' is not a core axis .* The available core axes are"
        r" \('core',\)",
    ):
      kernel(jnp.ones(_SHAPE, jnp.float32))

  def test_grid_axis_of_pallas_call_raises(self):
    def kernel(x_ref, o_ref):
      def body(buffer_ref):
        buffer_ref[...] = x_ref[...]
        o_ref[...] = buffer_ref[...]

      pl.run_scoped(
          body, pltpu.VMEM(_SHAPE, jnp.float32), collective_axes='i'
      )

    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid_spec=pl.GridSpec(
            grid=(2,),
            in_specs=[pl.BlockSpec(_SHAPE, lambda i: (i, 0))],
            out_specs=pl.BlockSpec(_SHAPE, lambda i: (i, 0)),
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel',)
        ),
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            num_cores_or_threads=2,
        ),
        name='grid_axis_collective',
    )
    with self.assertRaisesRegex(
        ValueError,
        r"'i' is not a core axis .*grid axes of a pallas_call are not core"
        r" axes.* The available core axes are \(\)",
    ):
      f(jnp.ones((16, 128), jnp.float32))

  def test_mismatched_collective_allocations_raise(self):
    @test_util.kernel(
        out_type=_per_core_output(2),
        mesh=test_util.tensorcore_mesh('core', 2),
        interpret=pltpu.InterpretParams(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref):
        pltpu.sync_copy(x_ref.at[:, : buffer_ref.shape[1]], buffer_ref)

      @pl.when(core == 0)
      def _():
        pl.run_scoped(
            body, pltpu.VMEM(_SHAPE, jnp.float32), collective_axes='core'
        )

      @pl.when(core == 1)
      def _():
        pl.run_scoped(
            body, pltpu.VMEM((8, 64), jnp.float32), collective_axes='core'
        )

      pltpu.sync_copy(x_ref, o_ref.at[core])

    with test_util.fail_instead_of_hanging():
      with self.assertRaisesRegex(
          jax.errors.JaxRuntimeError,
          r'Collective run_scoped mismatch on device 0',
      ):
        kernel(jnp.ones(_SHAPE, jnp.float32)).block_until_ready()
    pltpu.reset_tpu_interpret_mode_state()

  def test_collective_scope_not_entered_by_all_cores_raises(self):
    @test_util.kernel(
        out_type=_per_core_output(2),
        mesh=test_util.tensorcore_mesh('core', 2),
        interpret=pltpu.InterpretParams(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref):
        pltpu.sync_copy(x_ref, buffer_ref)
        pltpu.sync_copy(buffer_ref, o_ref.at[core])

      @pl.when(core == 0)
      def _():
        pl.run_scoped(
            body, pltpu.VMEM(_SHAPE, jnp.float32), collective_axes='core'
        )

    with test_util.fail_instead_of_hanging():
      with self.assertRaisesRegex(
          jax.errors.JaxRuntimeError,
          r'entered by cores \[0\] but not by cores \[1\]',
      ):
        kernel(jnp.ones(_SHAPE, jnp.float32)).block_until_ready()
    pltpu.reset_tpu_interpret_mode_state()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
