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

"""Tests of outputs revisited in any order in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretRevisitAnyTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: their series have no patch for outputs'
          ' revisited in any order'
      )
    # Older jax releases: end.

  def _revisit_any_call(self, kernel, x, out_shape, out_index_map, grid,
                        buffer_count=1, **kwargs):
    """Calls `kernel` with (8, 128) blocks, its output revisited in any order.

    The input's block at grid point `(i, j)` is `(i, j)`; the output's is
    `out_index_map(i, j)`, with `pl.Buffered(buffer_count,
    revisit=pl.RevisitMode.ANY)`.
    """
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(out_shape, x.dtype),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec(
            (8, 128),
            out_index_map,
            pipeline_mode=pl.Buffered(
                buffer_count, revisit=pl.RevisitMode.ANY
            ),
        ),
        grid=grid,
        interpret=test_util.interpret_params(),
        **kwargs,
    )(x)

  @parameterized.parameters((3, 3), (2, 4), (4, 1))
  def test_reduction_over_the_outer_grid_axis(self, rows, cols):
    # As upstream's test_block_reduction_with_non_immediate_revisit: the
    # output's block j is visited at (0, j), (1, j), ...: after all the other
    # blocks of the output each time.
    x = np.arange(rows * 8 * cols * 128, dtype=np.float32).reshape(
        rows * 8, cols * 128) / 64

    def kernel(x_ref, o_ref):
      @pl.when(pl.program_id(0) == 0)
      def _():
        o_ref[...] = jnp.zeros_like(o_ref)

      o_ref[...] += x_ref[...]

    out = self._revisit_any_call(
        kernel, x, (8, cols * 128), lambda i, j: (0, j), (rows, cols))
    np.testing.assert_allclose(
        out, x.reshape(rows, 8, cols * 128).sum(axis=0), rtol=1e-6)

  def test_each_visit_sees_the_block_as_last_written(self):
    # Output blocks 0, 1, 0, 2, 1, 0 (a visit count per block): each visit
    # adds 1 to what the block held when the kernel last left it. Block 0 is
    # visited 3 times, 1 twice and 2 once.
    visits = np.array([0, 1, 0, 2, 1, 0], np.int32)
    x = np.zeros((8, 6 * 128), np.int32)

    def kernel(x_ref, o_ref):
      del x_ref
      j = pl.program_id(1)

      # The output is not initialized: zeros at each block's first visit.
      @pl.when((j == 0) | (j == 1) | (j == 3))
      def _():
        o_ref[...] = jnp.zeros_like(o_ref)

      o_ref[...] += 1

    def out_index_map(i, j):
      del i
      # visits[j], from literals (an index map captures no constants).
      return 0, jnp.where(
          j == 1, 1, jnp.where(j == 3, 2, jnp.where(j == 4, 1, 0)))

    out = self._revisit_any_call(
        kernel, x, (8, 3 * 128), out_index_map, (1, 6))
    expected = np.repeat(np.bincount(visits), 128)[None, :].repeat(8, 0)
    np.testing.assert_array_equal(out, expected)

  def test_first_visit_reads_the_aliased_input(self):
    # The output is the input, aliased: its blocks hold the input's values at
    # their first visit too. Each of the 4 visits (output blocks 0, 1, 0, 1)
    # adds 1; blocks 2 and 3 are not visited and keep the input's values.
    x = np.arange(8 * 512, dtype=np.int32).reshape(8, 512)

    def kernel(x_ref, o_ref):
      del x_ref
      o_ref[...] += 1

    out = self._revisit_any_call(
        kernel, x, x.shape, lambda i, j: (0, j % 2), (1, 4),
        input_output_aliases={0: 0})
    expected = x.copy()
    expected[:, :256] += 2
    np.testing.assert_array_equal(out, expected)

  def test_without_revisit_any_a_late_revisit_is_an_error(self):
    x = np.zeros((16, 256), np.float32)

    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...]

    with self.assertRaisesRegex(Exception, 'Revisited block'):
      jax.block_until_ready(pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct((8, 256), x.dtype),
          in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
          out_specs=pl.BlockSpec((8, 128), lambda i, j: (0, j)),
          grid=(2, 2),
          interpret=test_util.interpret_params(),
      )(x))
    test_util.reset_after_failure()

  def test_revisit_any_with_two_buffers_is_mosaics_error(self):
    x = np.zeros((8, 128), np.float32)

    def kernel(x_ref, o_ref):
      o_ref[...] = x_ref[...]

    with self.assertRaisesRegex(
        ValueError, 'RevisitMode.ANY is not supported with double buffering'):
      self._revisit_any_call(
          kernel, x, x.shape, lambda i, j: (i, j), (1, 1), buffer_count=2)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
