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

"""Tests for deadlock detection in TPU interpret mode.

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


jax.config.parse_flags_with_absl()



# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretDeadlockTest(test_util.InterpretTestCase):

  @parameterized.product(num_cores=[2, 4], decrement=[False, True])
  def test_unsatisfiable_waits_raise_deadlock_error(self, num_cores, decrement):
    def make_kernel(num_cores):
      # Every core waits for its own semaphore to reach core + 1; only core
      # 0's semaphore is ever signalled, with 1, so only core 0's wait can be
      # satisfied.
      @test_util.kernel(
          out_type=jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.float32),
          mesh=test_util.tensorcore_mesh(
              axis_name='core', num_cores=num_cores
          ),
          scratch_types=[
              pltpu.VMEM((8, 128), jnp.float32),
              pltpu.SemaphoreType.REGULAR,
          ],
          interpret=pltpu.InterpretParams(
              allow_non_decrementing_semaphore_wait=not decrement
          ),
      )
      def kernel(o_ref, vmem_ref, sem):
        core = jax.lax.axis_index('core')

        @pl.when(core == 0)
        def _():
          pl.semaphore_signal(sem, 1)

        pl.semaphore_wait(sem, core + 1, decrement=decrement)
        vmem_ref[...] = jnp.zeros((8, 128), jnp.float32)
        pltpu.sync_copy(vmem_ref, o_ref.at[core])

      return kernel

    # The error is raised in a callback: the caller gets a JaxRuntimeError
    # whose message names the error's class and the (device, core) that found
    # the deadlock, the last one to block or finish.
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError, r'\bDeadlockError: '
    ) as cm:
      make_kernel(num_cores)().block_until_ready()
    pltpu.reset_tpu_interpret_mode_state()
    message = str(cm.exception)
    # Older jax releases: begin.
    failed_on = r'(\(0, \d+\)|device 0, core \d+)'
    # At jax HEAD: failed_on = r'\(0, \d+\)'
    # Older jax releases: end.
    self.assertRegex(
        message, rf'Computation failed on {failed_on} with exception'
    )
    self.assertIn('Deadlock: every core is finished or blocked', message)
    for core in range(1, num_cores):
      # Where `pl.kernel` allocates its scratch with a `run_scoped`, the
      # message also says where the semaphore was allocated.
      self.assertRegex(
          message,
          rf'device 0, core {core}: waits at [^\n]*_test\.py:\d+[^\n]* for'
          rf' semaphore \d+( allocated at [^\n]*)? to reach {core + 1}; its'
          r' count is 0\.',
      )
    self.assertIn('Finished (device, core): [(0, 0)]', message)
    # After the reset, the next kernel runs normally. With one core, core
    # 0's own wait is satisfied and nothing is blocked.
    out = jax.block_until_ready(make_kernel(1)())
    np.testing.assert_array_equal(out, np.zeros((1, 8, 128)))

  def test_single_core_unsatisfiable_wait_raises(self):
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=1),
        scratch_types=[pltpu.VMEM((8, 128), jnp.float32)],
        interpret=pltpu.InterpretParams(),
    )
    def kernel(o_ref, vmem_ref):
      def body(sem):
        pl.semaphore_signal(sem, 2)
        pl.semaphore_wait(sem, 3)
        # Never reached: the output is written after the wait.
        vmem_ref[...] = jnp.ones((8, 128), jnp.float32)
        pltpu.sync_copy(vmem_ref, o_ref)

      pl.run_scoped(body, pltpu.SemaphoreType.REGULAR)

    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'device 0, core 0: waits at .* for semaphore \d+ allocated at'
        r' .*_test\.py:\d+.* to reach 3; its'
        r' count is 2\.',
    ):
      kernel().block_until_ready()
    pltpu.reset_tpu_interpret_mode_state()

  def test_never_entered_collective_scope_raises(self):
    # Core 0 waits in a collective scope for core 1, which never enters it.
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        interpret=pltpu.InterpretParams(
            allow_collective_axes_in_run_scoped=True,
        ),
    )
    def kernel(x_ref, o_ref):
      core = jax.lax.axis_index('core')

      def body(buffer_ref, sem):
        pl.semaphore_wait(sem, 2)
        pltpu.sync_copy(x_ref, buffer_ref)
        pltpu.sync_copy(buffer_ref, o_ref.at[core])

      @pl.when(core == 0)
      def _():
        pl.run_scoped(
            body,
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes='core',
        )

    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'device 0, core 0: waits at .* for collective semaphore -\d+'
        r' allocated at .* to reach 2; its count is 0\.(.|\n)*Finished'
        r' \(device, core\): \[\(0, 1\)\]',
    ):
      kernel(jnp.ones((8, 128), jnp.float32)).block_until_ready()
    pltpu.reset_tpu_interpret_mode_state()

  @parameterized.parameters('eager', 'on_wait')
  def test_wait_satisfied_by_queued_dma_is_not_reported(
      self, dma_execution_mode
  ):
    # Core 1 finishes at once; core 0 waits for its own DMA. Under 'on_wait',
    # the DMA is still queued when core 0 waits.
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=pltpu.InterpretParams(dma_execution_mode=dma_execution_mode),
    )
    def kernel(x_ref, o_ref, vmem_ref, sem):
      core = jax.lax.axis_index('core')

      @pl.when(core == 0)
      def _():
        copy = pltpu.make_async_copy(x_ref, vmem_ref, sem)
        copy.start()
        copy.wait()
        pltpu.sync_copy(vmem_ref, o_ref.at[0])

    x = jnp.full((8, 128), 4.0, jnp.float32)
    out = jax.block_until_ready(kernel(x))
    np.testing.assert_array_equal(out[0], x)

  def test_wait_for_busy_core_is_not_reported(self):
    # Core 1 computes for a while before it signals core 0, which waits.
    num_iterations = 300

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.REGULAR,
        ],
        interpret=pltpu.InterpretParams(),
    )
    def kernel(o_ref, vmem_ref, sem):
      core = jax.lax.axis_index('core')
      vmem_ref[...] = jnp.zeros((8, 128), jnp.float32)

      @pl.when(core == 1)
      def _():
        def step(i, carry):
          vmem_ref[...] += 1.0
          return carry

        jax.lax.fori_loop(0, num_iterations, step, 0)
        pl.semaphore_signal(sem, 1, core_index=0)

      @pl.when(core == 0)
      def _():
        pl.semaphore_wait(sem, 1)

      pltpu.sync_copy(vmem_ref, o_ref.at[core])

    out = jax.block_until_ready(kernel())
    np.testing.assert_array_equal(out[0], np.zeros((8, 128)))
    np.testing.assert_array_equal(out[1], np.full((8, 128), num_iterations))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
