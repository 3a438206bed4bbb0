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

"""Tests for `pl.debug_check` in TPU interpret mode.

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
class InterpretDebugCheckTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10 and older: their series have no debug-check patch (0010)'
      )
    # Older jax releases: end.

  @parameterized.parameters(True, False)
  def test_failed_debug_check_fails_the_kernel(self, enabled):
    # Row 3 holds the one non-positive element. With debug checks enabled
    # the kernel fails there, naming the check; without, the check is
    # dropped and the kernel copies its input.
    def kernel(x_ref, o_ref):
      pl.debug_check(jnp.all(x_ref[...] > 0), 'x must be positive')
      o_ref[...] = x_ref[...] * 2

    x = np.ones((4, 8, 128), np.float32)
    x[3, 5, 7] = -1.0
    call = pl.pallas_call(
        kernel,
        grid=(4,),
        in_specs=[pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))],
        out_specs=pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=pltpu.InterpretParams(),
    )
    with pl.enable_debug_checks(enabled):
      if enabled:
        with self.assertRaisesRegex(
            jax.errors.JaxRuntimeError,
            r'pl.debug_check failed on device 0, core 0 at .*'
            r'x must be positive',
        ):
          jax.block_until_ready(call(x))
        test_util.reset_after_failure()
        # The check holds for every block of a positive input.
        np.testing.assert_array_equal(call(np.abs(x)), np.abs(x) * 2)
      else:
        np.testing.assert_array_equal(call(x), x * 2)

  def test_debug_check_on_one_core_of_a_mesh(self):
    # Only core 1's check fails: the kernel fails on core 1.
    @test_util.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        interpret=test_util.interpret_params(),
    )
    def kernel(o_ref):
      core = jax.lax.axis_index('core')
      pl.debug_check(core == 0, 'only core 0 gets here')
      del o_ref

    with pl.enable_debug_checks(True):
      with self.assertRaisesRegex(
          jax.errors.JaxRuntimeError,
          r'pl.debug_check failed on device 0, core 1 at .*'
          r'only core 0 gets here',
      ):
        jax.block_until_ready(kernel())
    test_util.reset_after_failure()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
