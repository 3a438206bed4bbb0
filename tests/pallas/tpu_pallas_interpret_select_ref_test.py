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

"""Tests for `pl.select_ref` in DMAs in TPU interpret mode.

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


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSelectRefTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: their series have no pl.select_ref patch'
          ' (0021)'
      )
    # Older jax releases: end.

  @parameterized.product(
      idx=[0, 1, 2, -1, 3, 100],
      dma_execution_mode=['eager', 'on_wait'],
  )
  def test_select_source_by_smem_index(self, idx, dma_execution_mode):
    # The source of a DMA is one of three HBM refs (one of them a slice),
    # chosen by an index read from SMEM. As Mosaic's lowering (nested
    # `scf.if`s), an index outside [0, 3) selects the last ref.
    rng = np.random.default_rng(0)
    x0 = rng.integers(-100, 100, size=(16, 128)).astype(np.int32)
    x1 = rng.integers(-100, 100, size=(8, 128)).astype(np.int32)
    x2 = rng.integers(-100, 100, size=(8, 128)).astype(np.int32)

    def kernel(idx_ref, x0_ref, x1_ref, x2_ref, o_ref, sem):
      src = pl.select_ref(idx_ref[0], x0_ref.at[8:16], x1_ref, x2_ref)
      pltpu.async_copy(src, o_ref, sem).wait()

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)]
        + [pl.BlockSpec(memory_space=pl.ANY)] * 3,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=test_util.interpret_params(
            dma_execution_mode=dma_execution_mode
        ),
    )(np.array([idx], np.int32), x0, x1, x2)

    expected = [x0[8:16], x1, x2][idx if 0 <= idx < 3 else 2]
    np.testing.assert_array_equal(out, expected)

  @parameterized.parameters(False, True)
  def test_select_destination_and_semaphores_in_loop(self, detect_races):
    # Step i copies row block i of the input to output i % 3, at row block
    # i // 3, signalling semaphore i % 2 of two; the wait selects the same
    # semaphore. Its semaphore count is that of the copy it waits for.
    num_steps = 6
    x = np.arange(num_steps * 8 * 128, dtype=np.float32).reshape(-1, 128)

    def kernel(x_ref, o0_ref, o1_ref, o2_ref, sems):
      @pl.loop(0, num_steps)
      def _(i):
        dst = pl.select_ref(i % 3, o0_ref, o1_ref, o2_ref)
        pltpu.make_async_copy(
            x_ref.at[pl.ds(8 * i, 8)],
            dst.at[pl.ds(8 * (i // 3), 8)],
            pl.select_ref(i % 2, sems.at[0], sems.at[1]),
        ).start()
        pltpu.make_async_copy(
            x_ref.at[pl.ds(0, 8)],
            o0_ref.at[pl.ds(0, 8)],
            pl.select_ref(i % 2, sems.at[0], sems.at[1]),
        ).wait()

    out_shape = jax.ShapeDtypeStruct((16, 128), jnp.float32)
    outs = pl.pallas_call(
        kernel,
        out_shape=(out_shape,) * 3,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pl.ANY),) * 3,
        scratch_shapes=[pltpu.SemaphoreType.DMA((2,))],
        interpret=test_util.interpret_params(
            detect_races=detect_races, on_race='warn'
        ),
    )(x)

    blocks = x.reshape(num_steps, 8, 128)
    for j, out in enumerate(outs):
      np.testing.assert_array_equal(
          out, blocks[j::3].reshape(-1, 128)
      )
    if detect_races:
      self.assertFalse(mosaic_interpret.races.races_found)

  @parameterized.parameters(0, 1, 2, 3)
  def test_nested_select_with_views(self, step):
    # `pl.select_ref` of `pl.select_ref`s of column halves, reshaped and
    # bitcast; the destination is a VMEM scratch buffer. An index of 2 or 3
    # selects the last semaphore.
    x = np.arange(4 * 8 * 256, dtype=np.int32).reshape(4, 8, 256)

    def kernel(x0_ref, x1_ref, o_ref, buf, sems):
      i = pl.program_id(0) * 0 + step
      halves = [
          pl.select_ref(i // 2, r.at[:, :, :128], r.at[:, :, 128:])
          for r in (x0_ref, x1_ref)
      ]
      src = pl.select_ref(i % 2, *halves).reshape(16, 128)
      copy = pltpu.make_async_copy(
          src.bitcast(jnp.float32),
          buf.bitcast(jnp.float32),
          pl.select_ref(i, sems.at[0], sems.at[1]),
      )
      copy.start()
      copy.wait()
      o_ref[...] = buf[...]

    out = pl.pallas_call(
        kernel,
        grid=(1,),
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
        out_specs=pl.BlockSpec((16, 128), lambda i: (0, 0)),
        scratch_shapes=[
            pltpu.VMEM((16, 128), jnp.int32),
            pltpu.SemaphoreType.DMA((2,)),
        ],
        interpret=test_util.interpret_params(),
    )(x[:2], x[2:])

    xs = [x[:2], x[2:]]
    half = xs[step % 2][:, :, 128:] if step // 2 else xs[step % 2][:, :, :128]
    np.testing.assert_array_equal(out, half.reshape(16, 128))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
