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

"""Tests of `InterpretParams(on_nonzero_semaphore_at_exit='raise')`.

A kernel that ends with a semaphore whose count is not zero fails, naming
every such semaphore, its kernel argument, core and count.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import contextlib
import dataclasses
import io

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
class InterpretNonzeroSemaphoreTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    fields = {f.name for f in dataclasses.fields(pltpu.InterpretParams)}
    if 'on_nonzero_semaphore_at_exit' not in fields:
      self.skipTest('jax 0.10.x and older: their series have no such patch')
    # Older jax releases: end.

  def _call(self, kernel, on_nonzero, num_semaphores=1):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR((num_semaphores,))],
        interpret=test_util.interpret_params(
            on_nonzero_semaphore_at_exit=on_nonzero
        ),
    )

  def test_semaphore_left_nonzero_raises(self):
    def kernel(o_ref, sems):
      pl.semaphore_signal(sems.at[0], 2)
      pl.semaphore_signal(sems.at[2], 1)
      o_ref[0] = jnp.int32(1)

    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'Semaphores with a non-zero count at kernel exit(.|\n)*'
        r'  semaphore \d+ \(kernel argument sems\[0\]\) on device 0, core 0:'
        r' 2\n'
        r'  semaphore \d+ \(kernel argument sems\[2\]\) on device 0, core 0:'
        r' 1',
    ):
      jax.block_until_ready(self._call(kernel, 'raise', num_semaphores=3)())
    test_util.reset_after_failure()

  def test_semaphores_consumed_do_not_raise(self):
    def kernel(o_ref, sems):
      pl.semaphore_signal(sems.at[0], 2)
      pl.semaphore_wait(sems.at[0], 2)
      o_ref[0] = jnp.int32(1)

    out = jax.block_until_ready(self._call(kernel, 'raise')())
    np.testing.assert_array_equal(out, [1])

  def test_print_is_the_default(self):
    def kernel(o_ref, sems):
      pl.semaphore_signal(sems.at[0], 3)
      o_ref[0] = jnp.int32(1)

    self.assertEqual(
        pltpu.InterpretParams().on_nonzero_semaphore_at_exit, 'print'
    )
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
      out = jax.block_until_ready(self._call(kernel, 'print')())
    np.testing.assert_array_equal(out, [1])
    self.assertRegex(
        stdout.getvalue(),
        r'Semaphore \d+ \(kernel argument sems\[0\]\) has non-zero count for'
        r' device 0 \(global core 0\) at kernel exit: 3 \(InterpretParams\('
        r"on_nonzero_semaphore_at_exit='raise'\) makes this an error\)",
    )

  def test_other_values_raise(self):
    with self.assertRaisesRegex(ValueError, 'on_nonzero_semaphore_at_exit'):
      pltpu.InterpretParams(on_nonzero_semaphore_at_exit='warn')


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
