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

"""Tests of dynamic grid sizes in TPU interpret mode.

A dynamic grid size is a traced scalar or an array of one element.

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
class InterpretDynamicGridTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 1):
      self.skipTest(
          'jax 0.10.0 and older: their series have no dynamic grid size patch'
          " (0.10.0's interpreter differs there; 0.9.x and older are"
          ' maintenance-only)'
      )
    # Older jax releases: end.

  def _count_steps(self, *sizes):
    """Runs a kernel over `grid=sizes` that counts its grid steps in SMEM."""

    def kernel(o_ref):
      first = pl.program_id(0) == 0
      for i in range(1, len(sizes)):
        first = jnp.logical_and(first, pl.program_id(i) == 0)
      o_ref[0] = jax.lax.cond(first, lambda: 1, lambda: o_ref[0] + 1)

    @jax.jit
    def f(*sizes):
      return pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
          grid=sizes,
          out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
          interpret=test_util.interpret_params(),
      )()

    return jax.block_until_ready(f(*sizes))

  @parameterized.named_parameters(('scalar', ()), ('one_element', (1,)),
                                  ('one_element_2d', (1, 1)))
  def test_dynamic_grid_size_of_one_element(self, shape):
    # As upstream's hardware test `test_dynamic_grid_with_smem_output`,
    # whose size has shape (1,).
    n = jnp.full(shape, 5, jnp.int32)
    np.testing.assert_array_equal(self._count_steps(n), [5])

  def test_dynamic_and_static_grid_sizes(self):
    n = jnp.array([3], jnp.int32)
    m = jnp.int32(4)
    np.testing.assert_array_equal(self._count_steps(n, 2, m), [3 * 2 * 4])

  def test_dynamic_grid_size_picks_the_blocks(self):
    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...] + pl.program_id(0).astype(jnp.float32)

    @jax.jit
    def f(n, x):
      return pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          grid=(n,),
          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
          interpret=test_util.interpret_params(),
      )(x)

    x = jnp.arange(4 * 8 * 128, dtype=jnp.float32).reshape(4 * 8, 128)
    out = jax.block_until_ready(f(jnp.array([3], jnp.int32), x))
    expected = np.asarray(x) + np.repeat(np.arange(4), 8)[:, None]
    # The grid covers the first 3 of the 4 row blocks.
    np.testing.assert_array_equal(out[: 3 * 8], expected[: 3 * 8])

  def test_dynamic_grid_size_of_more_elements_raises(self):
    with self.assertRaisesRegex(
        NotImplementedError,
        r'dynamic grid size of shape \(2,\): TPU interpret mode takes a'
        ' scalar or an array of one element',
    ):
      self._count_steps(jnp.array([2, 3], jnp.int32))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
