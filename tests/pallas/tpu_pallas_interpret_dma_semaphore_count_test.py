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

"""Tests of the count of a DMA semaphore in TPU interpret mode.

The expected counts are what `pl.semaphore_read` returned on a TPU v5e
(jax 0.10.2) after the same copies.

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
class InterpretDmaSemaphoreCountTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: their series count a DMA semaphore in bytes'
      )
    # Older jax releases: end.

  def _copy_and_read(self, src, dst, shape, dtype, dma_execution_mode):
    """Copies an array; returns the copy and the semaphore's counts.

    The counts: polled after `start()` until non-zero (at most 100 times),
    then after `wait()`.
    """
    x = (np.arange(np.prod(shape)) % 100).astype(dtype).reshape(shape)
    memory_space = {'hbm': pl.ANY, 'vmem': pltpu.VMEM, 'smem': pltpu.SMEM}

    def kernel(x_ref, counts_ref, y_ref, *scratch):
      *dst_ref, sem = scratch
      dst_ref = dst_ref[0] if dst_ref else y_ref
      copy = pltpu.make_async_copy(x_ref, dst_ref, sem)
      copy.start()
      polls = jax.lax.while_loop(
          lambda polls: (pl.semaphore_read(sem) == 0) & (polls < 100),
          lambda polls: polls + 1,
          jnp.int32(0),
      )
      counts_ref[0] = pl.semaphore_read(sem)
      copy.wait()
      counts_ref[1] = pl.semaphore_read(sem)
      counts_ref[2] = polls
      if dst != 'hbm':
        pltpu.sync_copy(dst_ref, y_ref)

    scratch_shapes = [pltpu.SemaphoreType.DMA]
    if dst != 'hbm':
      scratch_shapes.insert(0, memory_space[dst](shape, dtype))
    counts, y = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((3,), jnp.int32),
            jax.ShapeDtypeStruct(shape, dtype),
        ),
        in_specs=[pl.BlockSpec(memory_space=memory_space[src])],
        out_specs=(
            pl.BlockSpec(memory_space=pltpu.SMEM),
            pl.BlockSpec(memory_space=pl.ANY),
        ),
        scratch_shapes=scratch_shapes,
        interpret=test_util.interpret_params(
            dma_execution_mode=dma_execution_mode),
    )(x)
    return x, np.asarray(y), np.asarray(counts)

  # (source, destination, shape, dtype, the count on a TPU v5e).
  @parameterized.product(
      copy=(
          ('hbm', 'vmem', (8, 128), jnp.float32, 128),
          ('hbm', 'vmem', (64, 128), jnp.float32, 1024),
          ('hbm', 'vmem', (3, 128), jnp.float32, 48),
          ('hbm', 'vmem', (8, 64), jnp.float32, 128),
          ('hbm', 'vmem', (8, 200), jnp.float32, 256),
          ('hbm', 'vmem', (2, 3, 128), jnp.float32, 96),
          ('hbm', 'vmem', (7, 128), jnp.int32, 112),
          ('hbm', 'vmem', (1, 128), jnp.bfloat16, 16),
          ('hbm', 'vmem', (5, 128), jnp.bfloat16, 64),
          ('hbm', 'vmem', (17, 128), jnp.bfloat16, 192),
          ('hbm', 'vmem', (9, 128), jnp.int8, 64),
          ('hbm', 'vmem', (33, 128), jnp.int8, 160),
          ('hbm', 'hbm', (1000,), jnp.int32, 128),
          ('hbm', 'hbm', (2, 3, 5), jnp.float32, 96),
          ('hbm', 'hbm', (300,), jnp.bfloat16, 32),
          ('hbm', 'smem', (3,), jnp.int32, 16),
          ('hbm', 'smem', (256,), jnp.int32, 32),
          ('vmem', 'hbm', (8, 64), jnp.float32, 128),
          ('vmem', 'vmem', (3, 64), jnp.float32, 48),
          ('smem', 'smem', (1024,), jnp.int32, 128),
      ),
      dma_execution_mode=('on_wait', 'eager'),
  )
  def test_dma_semaphore_counts_as_on_a_tpu_v5e(self, copy,
                                                dma_execution_mode):
    src, dst, shape, dtype, count = copy
    x, y, counts = self._copy_and_read(src, dst, shape, dtype,
                                       dma_execution_mode)
    self.assertLess(counts[2], 100)
    # The count after the copy, then 0: the wait took all of it.
    np.testing.assert_array_equal(counts[:2], [count, 0])
    np.testing.assert_array_equal(y, x)

  def test_two_copies_to_one_semaphore_add_up(self):
    # A (3, 64) float32 copy counts 48 and an (8, 128) one 128; each wait
    # takes its own copy's count.
    a = np.arange(3 * 64, dtype=np.float32).reshape(3, 64)
    b = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)

    def kernel(a_ref, b_ref, counts_ref, a_vmem, b_vmem, sem):
      copy_a = pltpu.make_async_copy(a_ref, a_vmem, sem)
      copy_b = pltpu.make_async_copy(b_ref, b_vmem, sem)
      copy_a.start()
      copy_b.start()
      jax.lax.while_loop(
          lambda polls: (pl.semaphore_read(sem) < 176) & (polls < 100),
          lambda polls: polls + 1,
          jnp.int32(0),
      )
      counts_ref[0] = pl.semaphore_read(sem)
      copy_b.wait()
      counts_ref[1] = pl.semaphore_read(sem)
      copy_a.wait()
      counts_ref[2] = pl.semaphore_read(sem)

    counts = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((3,), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        scratch_shapes=[
            pltpu.VMEM((3, 64), jnp.float32),
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=test_util.interpret_params(dma_execution_mode='eager'),
    )(a, b)
    np.testing.assert_array_equal(counts, [176, 48, 0])


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
