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

"""Tests that TPU interpret mode frees a kernel's buffers when it ends.

The interpreter's memory, with the buffers of a kernel's inputs, outputs and
scratch, is freed when the kernel ends, without waiting for Python's cyclic
garbage collector: its semaphores refer to it weakly.
"""

import gc
import tracemalloc

from absl.testing import absltest
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
class InterpretFreeBuffersTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest('jax 0.9.x and older: their series have no such patch')
    # Older jax releases: end.

  def _held_after_calls(self, call, *args, calls=3):
    """NumPy memory still held after `calls` calls, without cyclic GC.

    Args:
      call: The kernel's function.
      *args: Its arguments.
      calls: How many times to call it, after a first call that compiles.

    Returns:
      The bytes that tracemalloc (to which NumPy reports) counts as
      allocated and not freed during the calls, and the last output.
    """
    jax.block_until_ready(call(*args))  # Compiles.
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
      for _ in range(calls):
        out = jax.block_until_ready(call(*args))
      held, _ = tracemalloc.get_traced_memory()
    finally:
      tracemalloc.stop()
      gc.enable()
    return held, out

  def test_an_inputs_buffer_is_freed(self):
    # A 4 MiB input in HBM, of which the kernel copies 16 rows by DMA, three
    # times: the interpreter's copies of the input are freed after each call.
    x = jnp.arange(1024 * 1024, dtype=jnp.float32).reshape(1024, 1024)

    def kernel(x_hbm, o_hbm, sem):
      pltpu.async_copy(x_hbm.at[pl.ds(8, 16)], o_hbm, sem).wait()

    call = pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        out_shape=jax.ShapeDtypeStruct((16, 1024), jnp.float32),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=test_util.interpret_params(),
    )
    held, out = self._held_after_calls(call, x)
    np.testing.assert_array_equal(out, x[8:24])
    self.assertLess(held, x.nbytes)

  def test_the_buffers_of_two_cores_are_freed(self):
    # Two cores exchange 2 MiB halves through VMEM scratch and REGULAR
    # semaphores.
    x = jnp.arange(1024 * 1024, dtype=jnp.float32).reshape(1024, 1024)

    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=[
            pltpu.VMEM((512, 1024), jnp.float32),
            pltpu.SemaphoreType.REGULAR,
        ],
        interpret=test_util.interpret_params(),
    )
    def call(x_hbm, o_hbm, buf, sem):
      core = jax.lax.axis_index('core')
      other = 1 - core
      pltpu.sync_copy(x_hbm.at[pl.ds(core * 512, 512)], buf)
      pltpu.sync_copy(buf, o_hbm.at[pl.ds(other * 512, 512)])
      pl.semaphore_signal(sem, 1, core_index=other)
      pl.semaphore_wait(sem, 1)

    held, out = self._held_after_calls(call, x)
    np.testing.assert_array_equal(out, jnp.concatenate([x[512:], x[:512]]))
    self.assertLess(held, x.nbytes)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
