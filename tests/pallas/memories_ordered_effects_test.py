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

"""Tests of jitted functions with ordered effects and outputs in host memory.

Not a Pallas test: TPU interpret mode needs the fix (a kernel there has
ordered effects), but it is a fix to jax's lowering, exported to upstream's
`tests/memories_test.py`.
"""

import functools

from absl.testing import absltest
import jax
from jax._src import test_util as jtu
from jax.experimental import io_callback
import numpy as np


jax.config.parse_flags_with_absl()


class OrderedEffectsMemoriesTest(jtu.JaxTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: their lowering fails the same way, and their'
          ' series, which have no host memory DMAs, do not carry the fix'
      )
    # Older jax releases: end.

  def _sharding(self, memory_kind):
    return jax.sharding.SingleDeviceSharding(
        jax.devices()[0], memory_kind=memory_kind)

  def test_ordered_io_callback_with_output_in_pinned_host(self):
    calls = []

    @functools.partial(
        jax.jit, out_shardings=self._sharding('pinned_host'))
    def f(x):
      io_callback(lambda: calls.append(len(calls)), None, ordered=True)
      return x * 2

    x = np.arange(8, dtype=np.float32)
    out = f(x)
    jax.effects_barrier()
    self.assertEqual(out.sharding.memory_kind, 'pinned_host')
    np.testing.assert_array_equal(out, x * 2)
    self.assertEqual(calls, [0])

  def test_ordered_io_callbacks_with_outputs_in_two_memory_kinds(self):
    # Two outputs, in two memory kinds, after the ordered effect's token (a
    # propagated memory kind per output, each given by `out_shardings`).
    calls = []

    @functools.partial(
        jax.jit,
        out_shardings=(self._sharding('pinned_host'), self._sharding('device')),
    )
    def f(x):
      io_callback(lambda: calls.append('first'), None, ordered=True)
      y = x + 1
      io_callback(lambda: calls.append('second'), None, ordered=True)
      return y, x - 1

    x = np.arange(8, dtype=np.float32)
    host_out, device_out = f(x)
    jax.effects_barrier()
    self.assertEqual(host_out.sharding.memory_kind, 'pinned_host')
    self.assertEqual(device_out.sharding.memory_kind, 'device')
    np.testing.assert_array_equal(host_out, x + 1)
    np.testing.assert_array_equal(device_out, x - 1)
    self.assertEqual(calls, ['first', 'second'])


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
