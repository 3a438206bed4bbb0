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

"""Tests of a pinned buffer (`pin`) passed to a `pallas_call`.

`pin` lowers to XLA:TPU's `Pin` custom call, which XLA:CPU does not have;
TPU interpret mode says it does not support such an input when the kernel is
traced.
"""

from absl.testing import absltest
import jax
from jax._src import test_util as jtu
from jax._src.state.primitives import pin, unpin
from jax.experimental import pallas as pl
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretPinnedBufferTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 0):
      self.skipTest('jax 0.9.x and older: their series have no such patch')
    # Older jax releases: end.

  def _copy(self, x, y):
    # A kernel whose output is its second input, as in upstream's
    # `PinnedBufferTest.test_basic`.
    def kernel(x_ref, y_ref, o_ref):
      del x_ref, y_ref, o_ref

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        input_output_aliases={1: 0},
        interpret=test_util.interpret_params(),
    )(x, y)

  def test_pinned_input(self):
    @jax.jit
    def f(x, y):
      return unpin(self._copy(x, pin(y)))

    with self.assertRaisesRegex(
        NotImplementedError,
        r"Input 1 of the pallas_call \(the kernel's `y_ref`\) is a pinned"
        r' buffer \(`pin`\): pinned buffers are not supported in TPU'
        ' interpret mode.',
    ):
      f(jnp.zeros(2), jnp.arange(3.0))

  def test_unpinned_input(self):
    # The same kernel on the arrays themselves runs.
    out = jax.jit(self._copy)(jnp.zeros(2), jnp.arange(3.0))
    np.testing.assert_array_equal(out, np.arange(3.0))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
