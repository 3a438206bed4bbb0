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

"""Tests for scalars captured by a `pl.kernel` body in TPU interpret mode.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import functools

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
class InterpretCapturedScalarTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 10, 1):
      self.skipTest(
          'jax 0.10.0 and older: their series have no captured scalar patch'
          ' (0014; 0011 in the 0.10.1 and 0.10.2 series)'
      )
    # Older jax releases: end.

  def test_dma_indexed_by_captured_scalars(self):
    x = np.arange(4 * 8 * 128, dtype=np.int32).reshape(4, 8, 128)
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      mesh = pltpu.create_tensorcore_mesh('x', num_cores=1)
    else:
      mesh = pltpu.TensorCoreMesh(axis_name='x', num_cores=1)
    # At jax HEAD: mesh = pltpu.TensorCoreMesh(axis_name='x', num_cores=1)
    # Older jax releases: end.

    def kernel(x_ref, o_ref, i, j):
      # `i` and `j` are closed over: the kernel gets them as values.
      pltpu.sync_copy(x_ref.at[i, pl.ds(j, 2)], o_ref.at[0])
      pltpu.sync_copy(x_ref.at[3 - i, pl.ds(j + 1, 2)], o_ref.at[1])

    @jax.jit
    def f(x, i, j):
      return pl.kernel(
          functools.partial(kernel, i=i, j=j),
          jax.ShapeDtypeStruct((2, 2, 128), jnp.int32),
          mesh=mesh,
          interpret=pltpu.InterpretParams(),
      )(x)

    for i, j in ((0, 0), (1, 5), (3, 2)):
      np.testing.assert_array_equal(
          f(x, i, j), np.stack([x[i, j : j + 2], x[3 - i, j + 1 : j + 3]])
      )


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
