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

`InterpretCollectiveRunScopedTest` holds the tests of the series' patch 0004
(collective scopes), `InterpretCollectiveRunScopedMisuseTest` those of 0005
(cores that disagree on a collective allocation or never enter it).

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from unittest import mock

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
class InterpretCollectiveRunScopedTest(test_util.InterpretTestCase):

  @parameterized.product(
      num_cores=[1, 2, 4],
      collective=[False, True],
      dma_execution_mode=['eager', 'on_wait'],
  )
  def test_collective_scope_shares_buffer_and_semaphore(
      self, num_cores, collective, dma_execution_mode
  ):
    # The last core fills the scope's buffer and signals every core's
    # semaphore; every core then copies the buffer out.
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=num_cores),
        interpret=test_util.interpret_params(
            allow_collective_axes_in_run_scoped=True,
            dma_execution_mode=dma_execution_mode,
            detect_races=True,
            on_race='warn',
            uninitialized_memory='zero',
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      # Core 0 makes private allocations that the other cores do not make;
      # the cores still agree on the ids of the collective allocations.
      @pl.when((core == 0) & collective)
      def _():
        pl.run_scoped(
            lambda scratch_ref, sem: None,
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.REGULAR,
        )

      def body(buffer_ref, sem, dma_sem):
        @pl.when(core == num_cores - 1)
        def _():
          pltpu.async_copy(x_ref, buffer_ref, dma_sem).wait()
          for i in range(num_cores):
            pl.semaphore_signal(sem, 1, core_index=i)

        pl.semaphore_wait(sem, 1)
        pltpu.sync_copy(buffer_ref, o_ref.at[core])

      pl.run_scoped(
          body,
          pltpu.VMEM((8, 128), jnp.float32),
          pltpu.SemaphoreType.REGULAR,
          pltpu.SemaphoreType.DMA,
          collective_axes='core' if collective else (),
      )

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape((8, 128))
    out = jax.block_until_ready(kernel(x))
    # With a private scope, every core but the last copies out its own
    # buffer, which no core wrote.
    expected = np.zeros((num_cores, 8, 128), np.float32)
    expected[-1] = x
    if collective:
      expected[:] = x
    np.testing.assert_array_equal(out, expected)
    self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters('vmem', 'smem', 'hbm')
  def test_collective_scope_in_memory_space(self, memory_space):
    # Core 0 writes its index plus one into the collective buffer; core 1
    # reads it after a semaphore, in every memory space.
    allocate = {
        'vmem': pltpu.VMEM((8, 128), jnp.int32),
        'smem': pltpu.SMEM((8,), jnp.int32),
        'hbm': pltpu.HBM((8, 128), jnp.int32),
    }[memory_space]

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=[pltpu.VMEM((8, 128), jnp.int32)],
        interpret=test_util.interpret_params(
            allow_collective_axes_in_run_scoped=True,
            allow_hbm_allocation_in_run_scoped=memory_space == 'hbm',
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
          vmem_ref[...] = jnp.full((8, 128), buffer_ref[core + 2])
        else:
          pltpu.sync_copy(buffer_ref, vmem_ref)
        pltpu.sync_copy(vmem_ref, o_ref.at[core])

      pl.run_scoped(
          body, allocate, pltpu.SemaphoreType.REGULAR, collective_axes='core'
      )

    x = jnp.arange(8 * 128, dtype=jnp.int32).reshape((8, 128))
    out = jax.block_until_ready(kernel(x))
    if memory_space == 'smem':
      expected = np.stack([np.full((8, 128), 44), np.full((8, 128), 45)])
    else:
      expected = np.stack([x, x])
    np.testing.assert_array_equal(out, expected)

  def test_nested_and_looped_collective_scopes(self):
    # An outer collective scope holds a table that core 0 fills once. In each
    # iteration of a loop, an inner collective scope holds a buffer that core 0
    # sets to (i + 1) * table, and every core adds it to its accumulator.
    num_cores, num_iterations = 4, 3

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=num_cores),
        scratch_types=[pltpu.VMEM((8, 128), jnp.float32)],
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            detect_races=True,
            on_race='warn',
        ),
    )
    def kernel(x_ref, o_ref, acc_ref):
      core = jax.lax.axis_index('core')
      acc_ref[...] = jnp.zeros((8, 128), jnp.float32)

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
              pltpu.VMEM((8, 128), jnp.float32),
              pltpu.SemaphoreType.REGULAR,
              collective_axes='core',
          )
          return carry

        jax.lax.fori_loop(0, num_iterations, step, 0)

      pl.run_scoped(
          outer,
          pltpu.VMEM((8, 128), jnp.float32),
          pltpu.SemaphoreType.REGULAR,
          collective_axes='core',
      )
      pltpu.sync_copy(acc_ref, o_ref.at[core])

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape((8, 128))
    out = jax.block_until_ready(kernel(x))
    expected = np.asarray(x) * sum(range(1, num_iterations + 1))
    np.testing.assert_array_equal(out, np.broadcast_to(expected, out.shape))
    self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters(False, True)
  def test_collective_buffer_race_detection(self, synchronized):
    # Both cores write the collective buffer. Ordered by the collective
    # semaphore, the writes do not race; unordered, they do.
    num_cores = 2

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=num_cores),
        interpret=test_util.interpret_params(
            allow_collective_axes_in_run_scoped=True,
            detect_races=True,
            on_race='warn',
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
          pltpu.VMEM((8, 128), jnp.float32),
          pltpu.SemaphoreType.REGULAR,
          collective_axes='core',
      )

    x = jnp.ones((8, 128), jnp.float32)
    out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, np.ones((num_cores, 8, 128)))
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
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=num_cores),
        scratch_types=[pltpu.VMEM((rows_per_core, 128), jnp.float32)],
        interpret=test_util.interpret_params(
            allow_non_decrementing_semaphore_wait=True,
            allow_collective_axes_in_run_scoped=True,
            detect_races=True,
            on_race='warn',
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
    out = jax.block_until_ready(kernel(x))
    expected = np.asarray(x) * 2.0 + np.repeat(
        np.arange(num_cores, dtype=np.float32), rows_per_core
    )[:, None]
    np.testing.assert_array_equal(out, np.broadcast_to(expected, out.shape))
    self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.named_parameters(
      ('needs_allow_flag', 'core', False, NotImplementedError,
       r'not supported by the Mosaic TPU compiler.*'
       r'InterpretParams\(allow_collective_axes_in_run_scoped=True\)'),
      ('axis_not_in_scope', 'rows', True, ValueError,
       r"'rows' is not a core axis .* The available core axes are"
       r" \('core',\)"),
  )
  def test_collective_axes_need_flag_and_core_axis(
      self, axis, allow, error, regex
  ):
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        interpret=pltpu.InterpretParams(
            allow_collective_axes_in_run_scoped=allow,
        ),
    )
    def kernel(x_ref, o_ref):
      def body(buffer_ref):
        pltpu.sync_copy(x_ref, buffer_ref)
        pltpu.sync_copy(buffer_ref, o_ref.at[jax.lax.axis_index('core')])

      pl.run_scoped(
          body, pltpu.VMEM((8, 128), jnp.float32), collective_axes=axis
      )

    with self.assertRaisesRegex(error, regex):
      kernel(jnp.ones((8, 128), jnp.float32))

  def test_collective_axes_outside_core_map_raises(self):
    def kernel(x_ref, o_ref):
      def body(buffer_ref):
        buffer_ref[...] = x_ref[...]
        o_ref[...] = buffer_ref[...]

      pl.run_scoped(
          body, pltpu.VMEM((8, 128), jnp.float32), collective_axes='i'
      )

    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid_spec=pl.GridSpec(
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        ),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=('parallel',)
        ),
        interpret=test_util.interpret_params(
            allow_collective_axes_in_run_scoped=True,
            num_cores_or_threads=2,
        ),
    )
    with self.assertRaisesRegex(
        ValueError,
        r"'i' is not a core axis .*grid axes of a pallas_call are not core"
        r" axes.* The available core axes are \(\)",
    ):
      f(jnp.ones((16, 128), jnp.float32))


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretCollectiveRunScopedMisuseTest(test_util.InterpretTestCase):

  @parameterized.named_parameters(
      # One run_scoped call site (same summarized source line), so only the
      # shapes differ.
      ('shape_mismatch_at_one_call_site', 64, False,
       r'(?s)(?=.*Collective run_scoped mismatch on device 0)'
       r'(?=.*\(8, 64\) float32)(?=.*\(8, 128\) float32)'),
      ('same_type_at_two_call_sites', 128, True,
       r'Collective run_scoped mismatch on device 0'),
      ('not_entered_by_all_cores', None, False,
       r'entered by cores \[0\] but not by cores \[1\]'),
  )
  def test_collective_allocation_mismatch_or_partial_entry_raises(
      self, core_1_columns, two_call_sites, regex
  ):
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        interpret=pltpu.InterpretParams(
            allow_collective_axes_in_run_scoped=True,
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref):
        pltpu.sync_copy(x_ref.at[:, : buffer_ref.shape[1]], buffer_ref)

      def scope(columns):
        pl.run_scoped(
            body, pltpu.VMEM((8, columns), jnp.float32), collective_axes='core'
        )

      pl.when(core == 0)(lambda: scope(128))
      if two_call_sites:
        @pl.when(core == 1)
        def _():
          pl.run_scoped(
              body,
              pltpu.VMEM((8, core_1_columns), jnp.float32),
              collective_axes='core',
          )
      elif core_1_columns is not None:
        pl.when(core == 1)(lambda: scope(core_1_columns))

      pltpu.sync_copy(x_ref, o_ref.at[core])

    with self.assertRaisesRegex(jax.errors.JaxRuntimeError, regex):
      kernel(jnp.ones((8, 128), jnp.float32)).block_until_ready()
    pltpu.reset_tpu_interpret_mode_state()

  def test_collective_allocations_are_forgotten_once_every_core_made_them(
      self,
  ):
    # Each iteration of the loop makes a new collective allocation (a buffer
    # and a semaphore); its record must go once every core has made it, so
    # the end-of-kernel check finds none left.
    num_cores, num_iterations = 2, 3
    # Older jax releases: begin.
    shared_memory_class = getattr(
        mosaic_interpret, 'memory', mosaic_interpret
    ).SharedMemory
    # At jax HEAD: shared_memory_class = mosaic_interpret.memory.SharedMemory
    # Older jax releases: end.
    get_incomplete = shared_memory_class.get_incomplete_collective_allocations
    num_records_at_exit = []

    def record_and_get_incomplete(shared_memory, device_id):
      num_records_at_exit.append(len(shared_memory.collective_allocations))
      return get_incomplete(shared_memory, device_id)

    self.enter_context(
        mock.patch.object(
            shared_memory_class,
            'get_incomplete_collective_allocations',
            record_and_get_incomplete,
        )
    )

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=num_cores),
        interpret=test_util.interpret_params(
            allow_collective_axes_in_run_scoped=True
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref, sem):
        del buffer_ref
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)

      def step(i, carry):
        pl.run_scoped(
            body,
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes='core',
        )
        return carry

      jax.lax.fori_loop(0, num_iterations, step, 0)
      pltpu.sync_copy(x_ref, o_ref.at[core])

    x = jnp.ones((8, 128), jnp.float32)
    out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out, np.broadcast_to(x, out.shape))
    self.assertEqual(num_records_at_exit, [0])


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
