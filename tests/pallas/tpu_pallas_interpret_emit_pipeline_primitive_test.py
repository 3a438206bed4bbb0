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

"""Tests for the `emit_pipeline` primitive in TPU interpret mode.

With `jax_use_emit_pipeline_primitive` on, `pltpu.emit_pipeline` binds a
primitive, which Mosaic lowers to the ordinary pipeline. Each kernel runs
with the flag on and off; both must agree with numpy (and so each other).
The kernels see a TPU v6e, described by an abstract mesh, on CPU.

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
class InterpretEmitPipelinePrimitiveTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: their series have no emit_pipeline'
          ' primitive patch (0025)'
      )
    # Older jax releases: end.

  def _use_tpu_v6e_for_pipeline(self):
    """Makes the kernels of the test see a TPU v6e."""
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))

  def _emit_pipeline_call(self, kernel, out_shape, *args, use_primitive,
                     **kwargs):
    """Runs `kernel` on HBM refs, with the primitive on or off."""
    self._use_tpu_v6e_for_pipeline()
    with jtu.global_config_context(
        jax_use_emit_pipeline_primitive=use_primitive):
      return pl.pallas_call(
          kernel,
          out_shape=out_shape,
          in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * len(args),
          out_specs=pl.BlockSpec(memory_space=pl.ANY),
          interpret=pltpu.InterpretParams(),
          **kwargs,
      )(*args)

  @parameterized.parameters(False, True)
  def test_emit_pipeline_elementwise(self, use_primitive):
    # The body sees the step's grid index as `pl.program_id` and the
    # pipeline's grid as `pl.num_programs`.
    def kernel(x_hbm, o_hbm):
      def body(x_ref, o_ref):
        o_ref[...] = (x_ref[...] * 2
                      + pl.program_id(0).astype(jnp.float32) * 1000
                      + jnp.float32(pl.num_programs(0)))

      pltpu.emit_pipeline(
          body,
          grid=(4,),
          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
          out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
      )(x_hbm, o_hbm)

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    out = self._emit_pipeline_call(
        kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
        use_primitive=use_primitive)
    step = np.repeat(np.arange(4, dtype=np.float32), 8)[:, None]
    np.testing.assert_array_equal(out, np.asarray(x) * 2 + step * 1000 + 4)

  @parameterized.parameters(False, True)
  def test_emit_pipeline_in_a_kernel_with_a_grid(self, use_primitive):
    # The pallas_call's own grid has no names: each of its 2 steps runs a
    # pipeline over its 16 rows, whose body sees the pipeline's index as
    # `pl.program_id`.
    def kernel(x_hbm, o_hbm):
      i = pl.program_id(0)

      def body(x_ref, o_ref):
        o_ref[...] = (x_ref[...] * 2 + i.astype(jnp.float32) * 1000
                      + pl.program_id(0).astype(jnp.float32))

      rows = pl.ds(i * 16, 16)
      pltpu.emit_pipeline(
          body,
          grid=(2,),
          in_specs=[pl.BlockSpec((8, 128), lambda j: (j, 0))],
          out_specs=[pl.BlockSpec((8, 128), lambda j: (j, 0))],
      )(x_hbm.at[rows], o_hbm.at[rows])

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    out = self._emit_pipeline_call(
        kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
        use_primitive=use_primitive, grid=(2,))
    outer = np.repeat(np.arange(2, dtype=np.float32), 16)[:, None]
    inner = np.tile(np.repeat(np.arange(2, dtype=np.float32), 8), 2)[:, None]
    np.testing.assert_array_equal(
        out, np.asarray(x) * 2 + outer * 1000 + inner)

  @parameterized.parameters(False, True)
  def test_emit_pipeline_dynamic_grid(self, use_primitive):
    # The grid's size is read from SMEM: `pl.num_programs` in the body is the
    # runtime size (3 of the 4 blocks), as Mosaic's lowering of the body
    # gives it; the last block is not visited.
    def kernel(n_ref, x_hbm, o_hbm):
      def body(x_ref, o_ref):
        o_ref[...] = (x_ref[...]
                      + pl.num_programs(0).astype(jnp.float32) * 100
                      + pl.program_id(0).astype(jnp.float32))

      pltpu.emit_pipeline(
          body,
          grid=(n_ref[0],),
          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
          out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
      )(x_hbm, o_hbm)

    self._use_tpu_v6e_for_pipeline()
    x = jnp.full((32, 128), -1.0, jnp.float32)
    with jtu.global_config_context(
        jax_use_emit_pipeline_primitive=use_primitive):
      out = pl.pallas_call(
          kernel,
          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                    pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=pl.BlockSpec(memory_space=pl.ANY),
          input_output_aliases={1: 0},
          interpret=pltpu.InterpretParams(),
      )(jnp.array([3], jnp.int32), x)
    expected = np.repeat(np.array([299.0, 300.0, 301.0, -1.0],
                                  np.float32), 8)[:, None]
    np.testing.assert_array_equal(out, np.broadcast_to(expected, x.shape))

  @parameterized.parameters(False, True)
  def test_emit_pipeline_matmul_accumulates(self, use_primitive):
    # The output block stays in VMEM while its index does not change (over
    # the k axis), so the body accumulates into it; it is written back to HBM
    # once, after the last k step.
    m, n, k, bm, bn, bk = 16, 256, 384, 8, 128, 128

    def kernel(x_hbm, y_hbm, o_hbm):
      def body(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
          o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += jnp.dot(x_ref[...], y_ref[...],
                              preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
          o_ref[...] = o_ref[...] * 2

      pltpu.emit_pipeline(
          body,
          grid=(m // bm, n // bn, k // bk),
          in_specs=[
              pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
              pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
          ],
          out_specs=[pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))],
      )(x_hbm, y_hbm, o_hbm)

    rng = np.random.default_rng(0)
    x = rng.integers(-4, 4, (m, k)).astype(np.float32)
    y = rng.integers(-4, 4, (k, n)).astype(np.float32)
    out = self._emit_pipeline_call(
        kernel, jax.ShapeDtypeStruct((m, n), jnp.float32), x, y,
        use_primitive=use_primitive)
    np.testing.assert_array_equal(out, 2 * (x @ y))

  @parameterized.parameters(False, True)
  def test_emit_pipeline_prefetches_input_blocks(self, use_primitive):
    # Input and output are one HBM buffer: step i reads block max(i - 1, 0)
    # and writes block i. The pipeline fetches step i's input block during
    # step i - 1, before step i - 1's output block is copied out, so each
    # step reads the buffer's original values: out[i] = x[max(i - 1, 0)] + 1.
    # Evaluated step by step, with no prefetch, step i would read step
    # i - 1's output instead (block 2 would be x[0] + 2).
    def kernel(x_hbm, o_hbm):
      del x_hbm  # The same buffer as o_hbm.

      def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

      pltpu.emit_pipeline(
          body,
          grid=(4,),
          in_specs=[pl.BlockSpec((8, 128),
                                 lambda i: (jnp.maximum(i - 1, 0), 0))],
          out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
      )(o_hbm, o_hbm)

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    out = self._emit_pipeline_call(
        kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
        use_primitive=use_primitive, input_output_aliases={0: 0})
    blocks = np.asarray(x).reshape(4, 8, 128)
    expected = blocks[np.maximum(np.arange(4) - 1, 0)] + 1
    np.testing.assert_array_equal(out, expected.reshape(32, 128))

  @parameterized.parameters(False, True)
  def test_emit_pipeline_split_over_two_cores(self, use_primitive):
    # With `core_axis_name`, each of the 2 cores of the mesh runs half of the
    # pipeline's steps (its PARALLEL axis split in two).
    mesh = test_util.tensorcore_mesh(axis_name='core', num_cores=2)

    def body(x_ref, o_ref):
      o_ref[...] = x_ref[...] + 1 + jax.lax.axis_index('core').astype(
          jnp.float32) * 1000

    def run():
      @test_util.kernel(
          out_type=jax.ShapeDtypeStruct((64, 128), jnp.float32),
          mesh=mesh,
          interpret=pltpu.InterpretParams(),
      )
      def kernel(x_hbm, o_hbm):
        pltpu.emit_pipeline(
            body,
            grid=(8,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            core_axis_name='core',
            dimension_semantics=(pltpu.PARALLEL,),
        )(x_hbm, o_hbm)

      return kernel(x)

    self._use_tpu_v6e_for_pipeline()
    x = jnp.arange(64 * 128, dtype=jnp.float32).reshape(64, 128)
    with jtu.global_config_context(
        jax_use_emit_pipeline_primitive=use_primitive):
      out = run()
    core = np.repeat(np.arange(2, dtype=np.float32), 32)[:, None]
    np.testing.assert_array_equal(out, np.asarray(x) + 1 + core * 1000)

  def test_emit_pipeline_vmap_num_programs_in_an_index_map(self):
    # Batching the primitive adds the batch axis in front of the pipeline's
    # grid, (1, n) with n = 4 known at run time only; the index map's
    # `pl.num_programs(1)` is the pipeline's n, as Mosaic traces it, also in
    # a kernel on a mesh. The input's blocks are read in reverse along the
    # last axis.
    mesh = test_util.tensorcore_mesh(axis_name='core', num_cores=1)

    def body(x_ref, o_ref):
      o_ref[...] = x_ref[...]

    def run(x):
      @test_util.kernel(
          out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
          mesh=mesh,
          interpret=pltpu.InterpretParams(),
      )
      def kernel(x_hbm, o_hbm):
        jax.vmap(pltpu.emit_pipeline(
            body,
            grid=(1, jnp.array(4)),
            in_specs=[pl.BlockSpec(
                (16, 128), lambda _, i: (0, pl.num_programs(1) - 1 - i))],
            out_specs=[pl.BlockSpec((16, 128), lambda _, i: (0, i))],
        ))(x_hbm, o_hbm)

      return kernel(x)

    self._use_tpu_v6e_for_pipeline()
    x = jnp.arange(3 * 16 * 512, dtype=jnp.int32).reshape(3, 16, 512)
    with jtu.global_config_context(jax_use_emit_pipeline_primitive=True):
      out = jax.jit(run)(x)
    expected = np.asarray(x).reshape(3, 16, 4, 128)[:, :, ::-1].reshape(
        3, 16, 512)
    np.testing.assert_array_equal(out, expected)

  @parameterized.parameters(False, True)
  def test_emit_pipeline_nested_in_the_body(self, use_primitive):
    # The outer pipeline's body runs a pipeline over its own blocks (VMEM
    # refs of a buffer slot): the inner DMAs copy from and to slices of the
    # outer slots.
    def kernel(x_hbm, o_hbm):
      def inner_body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1 + pl.program_id(0).astype(jnp.float32)

      def outer_body(x_ref, o_ref):
        pltpu.emit_pipeline(
            inner_body,
            grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda j: (j, 0))],
            out_specs=[pl.BlockSpec((8, 128), lambda j: (j, 0))],
        )(x_ref, o_ref)

      pltpu.emit_pipeline(
          outer_body,
          grid=(2,),
          in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
          out_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
      )(x_hbm, o_hbm)

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    out = self._emit_pipeline_call(
        kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
        use_primitive=use_primitive)
    inner = np.tile(np.repeat(np.arange(2, dtype=np.float32), 8), 2)[:, None]
    np.testing.assert_array_equal(out, np.asarray(x) + 1 + inner)

  @parameterized.parameters(False, True)
  def test_emit_pipeline_key_block(self, use_primitive):
    # A block in `pl.MemorySpace.KEY`, which Mosaic puts in SMEM: the body
    # draws from the key as a kernel that takes the key in SMEM does.
    def body(key_ref, o_ref):
      o_ref[...] = jax.random.uniform(key_ref[...], shape=o_ref.shape)

    def kernel(key_hbm, o_hbm):
      pltpu.emit_pipeline(
          body,
          grid=(),
          in_specs=[pl.BlockSpec(memory_space=pl.MemorySpace.KEY)],
          out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
      )(key_hbm, o_hbm)

    key = pltpu.to_pallas_key(jax.random.key(0))
    out_shape = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    out = self._emit_pipeline_call(
        kernel, out_shape, key, use_primitive=use_primitive)
    expected = pl.pallas_call(
        body,
        out_shape=out_shape,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        interpret=pltpu.InterpretParams(),
    )(key)
    np.testing.assert_array_equal(out, expected)
    # Draws, not a constant: uniform in [0, 1).
    self.assertTrue(np.all((out >= 0) & (out < 1)))
    self.assertGreater(len(np.unique(out)), 1000)

  @parameterized.parameters(1, 2)
  def test_emit_pipeline_vmap_with_explicit_indices(self, rows):
    # Batching the primitive adds a grid axis in front of the pipeline's
    # (`_emit_pipeline_batching_rule`); a body that takes the step explicitly
    # sees the indices of its own grid (rows, 4). With rows == 1 the first
    # index is a constant of the pipeline's loop, which the body must still
    # receive as its first argument.
    def kernel(o_hbm):
      def body(ps, o_ref):
        o_ref[...] = jnp.broadcast_to(ps.index[0] * 100 + ps.index[1],
                                      o_ref.shape)

      jax.vmap(pltpu.emit_pipeline(
          body,
          grid=(rows, 4),
          out_specs=[pl.BlockSpec((8, 128), lambda r, i: (r, i))],
          _explicit_indices=True,
      ))(o_hbm)

    out = self._emit_pipeline_call(
        kernel, jax.ShapeDtypeStruct((3, rows * 8, 4 * 128), jnp.int32),
        use_primitive=True)
    step = (np.arange(rows)[:, None] * 100 + np.arange(4)[None, :])
    expected = np.repeat(np.repeat(step, 8, axis=0), 128, axis=1)
    np.testing.assert_array_equal(
        out, np.broadcast_to(expected, (3, rows * 8, 4 * 128)))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
