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

"""Tests for deadlock detection across devices in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
from jax._src import dispatch
from jax._src import shard_map
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util

jax.config.parse_flags_with_absl()
jtu.request_cpu_devices(4)

P = jax.sharding.PartitionSpec


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretDeadlockDistributedTest(test_util.InterpretDistributedTestCase):

  @parameterized.parameters(0, 1, 2)
  def test_ring_deadlock_is_reported_when_signals_are_missing(
      self, num_missing_signals
  ):
    # Device d signals device d + 1; the last `num_missing_signals` devices do
    # not, so the devices after them wait forever.
    num_devices = 4
    mesh = jtu.create_mesh((num_devices,), ('x',))

    def kernel(o_ref, sem):
      my_id = lax.axis_index('x')
      right_neighbor = lax.rem(my_id + 1, num_devices)

      @pl.when(my_id < num_devices - num_missing_signals)
      def _():
        pl.semaphore_signal(sem, 1, device_id=(right_neighbor,))

      pl.semaphore_wait(sem, 1)
      o_ref[0] = my_id

    ring = jax.jit(shard_map.shard_map(
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            interpret=pltpu.InterpretParams(),
        ),
        mesh=mesh, in_specs=(), out_specs=P('x'), check_vma=False))
    if not num_missing_signals:
      out = jax.block_until_ready(ring())
      np.testing.assert_array_equal(out, np.arange(num_devices))
      return
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError, r'\bDeadlockError: '
    ) as cm:
      ring().block_until_ready()
    pltpu.reset_tpu_interpret_mode_state()
    # Every device's computation failed: wait for them all, and drop their
    # ordered-effect tokens, which would fail the next kernel on these
    # devices (the next test's).
    try:
      jax.effects_barrier()
    except Exception:  # pylint: disable=broad-exception-caught
      # One error, or a group of them (one per failed computation).
      dispatch.runtime_tokens.clear()
    message = str(cm.exception)
    self.assertIn('Deadlock: every core is finished or blocked', message)
    # Device 0 is never signalled when device 3 does not signal it.
    self.assertRegex(
        message,
        r'device 0, core 0: waits at .* for semaphore \d+ to reach 1; its'
        r' count is 0\.',
    )


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
