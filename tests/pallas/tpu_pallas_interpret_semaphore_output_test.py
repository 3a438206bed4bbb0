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

"""Tests for semaphore-typed pallas_call operands in TPU interpret mode.

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
class InterpretSemaphoreOutputTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 1):
      self.skipTest(
          'jax 0.10.0 and older: their series have no semaphore output patch'
          ' (0.10.0 has callbacks without tokens; 0.9 and older are'
          ' maintenance-only)'
      )
    # Older jax releases: end.

  @parameterized.product(
      dma_execution_mode=['on_wait', 'eager'], in_vmem=[False, True]
  )
  def test_dma_started_in_one_call_waited_in_another(
      self, dma_execution_mode, in_vmem
  ):
    # As upstream's tpu_pallas_async_test.py: the first call starts a DMA of
    # x[2] and returns its destination (in HBM or VMEM) and semaphore; the
    # second waits, then copies the destination to its output.
    interpret = pltpu.InterpretParams(dma_execution_mode=dma_execution_mode)
    space = pltpu.VMEM if in_vmem else pl.ANY

    def start_kernel(x_ref, aliased_x_ref, o_ref, sem):
      del aliased_x_ref
      pltpu.make_async_copy(x_ref.at[2], o_ref, sem).start()

    def done_kernel(x_ref, o_ref, sem, y_ref):
      pltpu.make_async_copy(x_ref.at[2], o_ref, sem).wait()
      copy = pltpu.make_async_copy(o_ref, y_ref, sem)
      copy.start()
      copy.wait()

    @jax.jit
    def copy(x):
      x, out, sem = pl.pallas_call(
          start_kernel,
          out_shape=(
              jax.ShapeDtypeStruct(x.shape, x.dtype),
              space(x.shape[1:], x.dtype),
              pltpu.SemaphoreType.DMA(()),
          ),
          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=(
              pl.BlockSpec(memory_space=pl.ANY),
              pl.BlockSpec(memory_space=space),
              pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
          ),
          input_output_aliases={0: 0},
          interpret=interpret,
      )(x)
      return pl.pallas_call(
          done_kernel,
          out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
          in_specs=[
              pl.BlockSpec(memory_space=pl.ANY),
              pl.BlockSpec(memory_space=space),
              pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
          ],
          out_specs=pl.BlockSpec(memory_space=pl.ANY),
          interpret=interpret,
      )(x, out, sem)

    x = np.random.default_rng(0).normal(size=(4, 8, 128)).astype(np.float32)
    np.testing.assert_array_equal(copy(x), x[2])

  def test_dma_into_vmem_waited_in_a_call_that_aliases_it(self):
    # As upstream's test_basic_async_copy_into_vmem: the second call only
    # waits, and its output, aliased to the VMEM destination, is that memory.
    def start_kernel(x_ref, o_ref, sem):
      pltpu.make_async_copy(x_ref, o_ref, sem).start()

    def done_kernel(x_ref, o_ref, sem, aliased_o_ref):
      del aliased_o_ref
      pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    @jax.jit
    def copy(x):
      out, sem = pl.pallas_call(
          start_kernel,
          out_shape=(
              pltpu.VMEM(x.shape, x.dtype),
              pltpu.SemaphoreType.DMA(()),
          ),
          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=(
              pl.BlockSpec(memory_space=pltpu.VMEM),
              pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
          ),
          interpret=pltpu.InterpretParams(),
      )(x)
      return pl.pallas_call(
          done_kernel,
          out_shape=pltpu.VMEM(x.shape, x.dtype),
          in_specs=[
              pl.BlockSpec(memory_space=pl.ANY),
              pl.BlockSpec(memory_space=pltpu.VMEM),
              pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
          ],
          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
          input_output_aliases={1: 0},
          interpret=pltpu.InterpretParams(),
      )(x, out, sem)

    x = np.random.default_rng(1).normal(size=(8, 128)).astype(np.float32)
    np.testing.assert_array_equal(copy(x), x)

  def test_regular_semaphore_count_carries_over(self):
    # Call 1 signals the semaphore by 2 at each of its 3 grid steps: 6. Call 2
    # reads 6, waits for 4 (leaving 2), reads 2, waits for 2, reads 0.
    def signal_kernel(sem):
      pl.semaphore_signal(sem, 2)

    def wait_kernel(sem, o_ref):
      o_ref[0] = pl.semaphore_read(sem)
      pl.semaphore_wait(sem, 4)
      o_ref[1] = pl.semaphore_read(sem)
      pl.semaphore_wait(sem, 2)
      o_ref[2] = pl.semaphore_read(sem)

    @jax.jit
    def run():
      sem = pl.pallas_call(
          signal_kernel,
          grid=(3,),
          out_shape=pltpu.SemaphoreType.REGULAR(()),
          out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
          interpret=pltpu.InterpretParams(),
      )()
      return pl.pallas_call(
          wait_kernel,
          out_shape=jax.ShapeDtypeStruct((3,), jnp.int32),
          in_specs=[pl.BlockSpec(memory_space=pltpu.SEMAPHORE)],
          out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
          interpret=pltpu.InterpretParams(),
      )(sem)

    np.testing.assert_array_equal(run(), np.array([6, 2, 0], np.int32))

  def test_semaphore_input_aliased_to_an_output_is_the_same_semaphore(self):
    # Call 1 signals by 5. Call 2, whose output aliases its input, reads 5,
    # waits for 3 and signals 1: the output's count is 5 - 3 + 1 = 3, which
    # call 3 reads.
    def signal_kernel(sem):
      pl.semaphore_signal(sem, 5)

    def update_kernel(sem, aliased_sem, o_ref):
      del aliased_sem
      o_ref[0] = pl.semaphore_read(sem)
      pl.semaphore_wait(sem, 3)
      pl.semaphore_signal(sem, 1)

    def read_kernel(sem, o_ref):
      o_ref[0] = pl.semaphore_read(sem)
      pl.semaphore_wait(sem, 3)

    semaphore_spec = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)
    smem_spec = pl.BlockSpec(memory_space=pltpu.SMEM)
    count_shape = jax.ShapeDtypeStruct((1,), jnp.int32)

    @jax.jit
    def run():
      sem = pl.pallas_call(
          signal_kernel,
          out_shape=pltpu.SemaphoreType.REGULAR(()),
          out_specs=semaphore_spec,
          interpret=pltpu.InterpretParams(),
      )()
      sem, count_in = pl.pallas_call(
          update_kernel,
          out_shape=(pltpu.SemaphoreType.REGULAR(()), count_shape),
          in_specs=[semaphore_spec],
          out_specs=(semaphore_spec, smem_spec),
          input_output_aliases={0: 0},
          interpret=pltpu.InterpretParams(),
      )(sem)
      count_out = pl.pallas_call(
          read_kernel,
          out_shape=count_shape,
          in_specs=[semaphore_spec],
          out_specs=smem_spec,
          interpret=pltpu.InterpretParams(),
      )(sem)
      return count_in[0], count_out[0]

    self.assertEqual(tuple(int(c) for c in run()), (5, 3))

  @parameterized.parameters('on_wait', 'eager')
  def test_dma_on_a_captured_semaphore_ref(self, dma_execution_mode):
    # As upstream's SparseCore test_basic_async_kernel, on a TensorCore: a
    # kernel makes a DMA semaphore; a ref to it in SEMAPHORE memory, captured
    # by two kernels (an input aliased to an output of each), carries the DMA
    # started by the first to the wait of the second.
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 1):
      self.skipTest(
          'jax 0.11.0 and older: pl.kernel passes captured refs as ANY'
          ' operands, which the interpreter does not fill from the ref'
      )
    # Older jax releases: end.
    interpret = pltpu.InterpretParams(dma_execution_mode=dma_execution_mode)
    mesh = test_util.tensorcore_mesh(axis_name='core', num_cores=1)

    @jax.jit
    def copy(x):
      sem = test_util.kernel(
          out_type=pltpu.SemaphoreType.DMA(()), mesh=mesh, interpret=interpret
      )(lambda _: None)()
      sem_ref = jax.new_ref(sem, memory_space=pltpu.SEMAPHORE)
      x_ref = jax.new_ref(x, memory_space=pltpu.HBM)
      y_ref = jax.new_ref(jnp.zeros_like(x), memory_space=pltpu.HBM)

      @test_util.kernel(out_type=(), mesh=mesh, interpret=interpret)
      def start():
        pltpu.make_async_copy(x_ref, y_ref, sem_ref).start()

      @test_util.kernel(out_type=(), mesh=mesh, interpret=interpret)
      def wait():
        pltpu.make_async_copy(x_ref, y_ref, sem_ref).wait()

      start()
      wait()
      return y_ref[...]

    x = np.random.default_rng(2).normal(size=(16, 128)).astype(np.float32)
    np.testing.assert_array_equal(copy(x), x)

  def test_semaphore_output_on_two_cores_is_not_implemented(self):
    # Each core has its own count, which one array cannot carry.
    def kernel(sem):
      pl.semaphore_signal(sem, 1)
      pl.semaphore_wait(sem, 1)

    run = jax.jit(pl.pallas_call(
        kernel,
        out_shape=pltpu.SemaphoreType.REGULAR(()),
        out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
        interpret=pltpu.InterpretParams(num_cores_or_threads=2),
    ))
    with self.assertRaisesRegex(
        NotImplementedError, 'Semaphore-typed .* with 2 cores per device'
    ):
      run.lower()

  @parameterized.parameters('input', 'output')
  def test_int32_array_in_semaphore_memory_is_not_implemented(self, operand):
    # Mosaic lowers it, but the interpreter keeps only semaphores in
    # SEMAPHORE memory.
    x = jnp.arange(8 * 128, dtype=jnp.int32).reshape((8, 128))
    if operand == 'input':
      def kernel(x_ref, o_ref):
        del x_ref
        o_ref[...] = jnp.zeros_like(o_ref)

      run = pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          in_specs=[pl.BlockSpec(memory_space=pltpu.SEMAPHORE)],
          interpret=pltpu.InterpretParams(),
      )
    else:
      def kernel(x_ref, o_ref):
        pltpu.sync_copy(x_ref, o_ref)

      run = pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
          interpret=pltpu.InterpretParams(),
      )
    with self.assertRaisesRegex(
        NotImplementedError, 'dtype int32 in SEMAPHORE memory'
    ):
      run(x)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
