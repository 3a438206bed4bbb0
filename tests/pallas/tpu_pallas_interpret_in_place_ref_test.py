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

"""Tests of inputs in VMEM or SMEM aliased to outputs in TPU interpret mode.

On a TPU such an input is passed to the kernel in place, so the aliased
output is the same memory: what the kernel writes to the input ref (e.g. a
ref made in VMEM or SMEM and captured by `pl.kernel`) is the output. The
expected values are computed with numpy.

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
class InterpretInPlaceRefTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 1):
      self.skipTest(
          'jax 0.10.0 and older: their series have no in-place inputs patch'
      )
    # Older jax releases: end.

  def _run_on_one_core(self, body):
    test_util.kernel(
        out_type=(),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=1),
        interpret=test_util.interpret_params(),
    )(body)()

  @parameterized.parameters(pltpu.VMEM, pltpu.SMEM)
  def test_ref_captured_by_kernel(self, memory_space):
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 1):
      self.skipTest(
          'jax 0.11.0 and older: pl.kernel passes captured refs as ANY'
          ' operands'
      )
    # Older jax releases: end.
    @jax.jit
    def f(x):
      y_ref = jax.new_ref(x, memory_space=memory_space)

      def add_index():
        for i in range(y_ref.shape[0]):
          y_ref[i] = y_ref[i] + i

      self._run_on_one_core(add_index)
      return y_ref[...]

    x = np.arange(8, dtype=np.int32) * 10
    np.testing.assert_array_equal(f(x), x + np.arange(8, dtype=np.int32))

  @parameterized.parameters(pltpu.VMEM, pltpu.SMEM)
  def test_two_kernels_share_a_ref(self, memory_space):
    # The second kernel sees what the first wrote.
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 1):
      self.skipTest(
          'jax 0.11.0 and older: pl.kernel passes captured refs as ANY'
          ' operands'
      )
    # Older jax releases: end.
    @jax.jit
    def f():
      y_ref = pl.empty_ref_like(memory_space((8,), jnp.int32))

      def write_squares():
        for i in range(y_ref.shape[0]):
          y_ref[i] = jnp.int32(i * i)

      def add_one():
        for i in range(y_ref.shape[0]):
          y_ref[i] = y_ref[i] + 1

      self._run_on_one_core(write_squares)
      self._run_on_one_core(add_one)
      return y_ref[...]

    np.testing.assert_array_equal(f(), np.arange(8, dtype=np.int32) ** 2 + 1)

  def test_dma_from_smem_ref_to_hbm_ref(self):
    # A DMA started in one kernel and waited on in the next copies what the
    # kernel before them wrote to the SMEM ref.
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 1):
      self.skipTest(
          'jax 0.11.0 and older: pl.kernel passes captured refs as ANY'
          ' operands'
      )
    # Older jax releases: end.
    @jax.jit
    def f():
      y_ref = pl.empty_ref_like(pltpu.SMEM((8,), jnp.int32))
      out_ref = pl.empty_ref_like(pltpu.HBM((8,), jnp.int32))
      sem = pl.empty_ref_like(pltpu.SemaphoreType.DMA(()))

      def write():
        for i in range(y_ref.shape[0]):
          y_ref[i] = jnp.int32(3 * i - 5)

      def start():
        pltpu.make_async_copy(y_ref, out_ref, sem).start()

      def wait():
        pltpu.make_async_copy(y_ref, out_ref, sem).wait()

      self._run_on_one_core(write)
      self._run_on_one_core(start)
      self._run_on_one_core(wait)
      return out_ref[...]

    np.testing.assert_array_equal(f(), 3 * np.arange(8, dtype=np.int32) - 5)

  def test_input_written_in_place_is_the_aliased_output(self):
    # A pallas_call whose VMEM input is aliased to its output and whose
    # kernel writes the input ref: the output is what it wrote.
    def kernel(x_ref, o_ref):
      del o_ref  # The same memory as x_ref.
      x_ref[...] = x_ref[...] * 2 + 1

    @jax.jit
    def f(x):
      x = pltpu.with_memory_space_constraint(x, memory_space=pltpu.VMEM)
      return pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
          input_output_aliases={0: 0},
          interpret=test_util.interpret_params(),
      )(x)

    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    np.testing.assert_array_equal(f(x), x * 2 + 1)

  def test_blocked_in_place_input_aliased_to_output_is_not_implemented(self):
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] + 1

    @jax.jit
    def f(x):
      x = pltpu.with_memory_space_constraint(x, memory_space=pltpu.VMEM)
      return pl.pallas_call(
          kernel,
          grid=(2,),
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
          input_output_aliases={0: 0},
          interpret=test_util.interpret_params(),
      )(x)

    with self.assertRaisesRegex(
        NotImplementedError,
        'Input 0 lives in vmem and is aliased to output 0: TPU interpret mode'
        ' supports this only when the kernel sees the input whole',
    ):
      f(np.zeros((16, 128), np.float32))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
