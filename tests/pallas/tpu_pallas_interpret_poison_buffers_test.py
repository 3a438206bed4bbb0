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

"""Tests for `pl.enable_poison_buffers` in TPU interpret mode.

With `jax_pallas_poison_buffers` on, Mosaic fills each buffer that
`run_scoped` or `jax.empty_ref` allocates with poison: NaN for floats, the
most negative value for signed integers (`1 << (width - 1)` for unsigned
ones) and True for bools. The expected values are numpy's.

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
class InterpretPoisonBuffersTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 2):
      self.skipTest(
          'jax 0.10.1 and older: no `jax_pallas_poison_buffers`'
      )
    # Older jax releases: end.

  @parameterized.product(
      dtype=(np.float32, np.int32, np.int8, np.uint32, np.bool_),
      allocated_by=('run_scoped', 'empty_ref'),
      uninitialized_memory=('nan', 'zero'),
  )
  def test_poisoned_buffer(self, dtype, allocated_by, uninitialized_memory):
    # The kernel copies a buffer it never wrote to the output.
    def kernel(o_ref):
      def body(buffer_ref):
        o_ref[...] = buffer_ref[...]

      if allocated_by == 'run_scoped':
        pl.run_scoped(body, pltpu.VMEM((8, 128), dtype))
      else:
        body(jax.empty_ref(
            jax.ShapeDtypeStruct((8, 128), dtype), memory_space=pltpu.VMEM
        ))

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), dtype),
        interpret=test_util.interpret_params(
            uninitialized_memory=uninitialized_memory
        ),
    )
    with pl.enable_poison_buffers(True):
      out = np.asarray(call())
    if dtype == np.float32:
      self.assertTrue(np.isnan(out).all())
    else:
      poison = {
          np.int32: np.iinfo(np.int32).min,
          np.int8: np.iinfo(np.int8).min,
          np.uint32: 2**31,
          np.bool_: True,
      }[dtype]
      np.testing.assert_array_equal(out, np.full((8, 128), poison, dtype))

  def test_buffers_not_poisoned_by_default(self):
    # Without the flag, the buffer is the interpreter's uninitialized value.
    def kernel(o_ref):
      def body(buffer_ref):
        o_ref[...] = buffer_ref[...]

      pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.int32))

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
        interpret=test_util.interpret_params(),
    )()
    np.testing.assert_array_equal(
        out, np.full((8, 128), np.iinfo(np.int32).max, np.int32)
    )


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
