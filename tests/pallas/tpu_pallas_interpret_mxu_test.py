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

"""Tests for the explicit MXU primitives in TPU interpret mode.

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
class InterpretExplicitMXUTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.x and older: their series have no explicit MXU patch'
          ' (0017)'
      )
    # Older jax releases: end.

  @parameterized.parameters(
      (jnp.float32, False),
      (jnp.bfloat16, False),
      (jnp.bfloat16, True),
      (jnp.int8, False),
      (jnp.int8, True),
  )
  def test_fifo_matmul(self, dtype, transpose):
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 1):
      self.skipTest('jax 0.11.0 has no matmul_lhs_fifo or matmul_pop_fifo')
    # Older jax releases: end.
    # A (64, 512) x (512, 256) matmul in (8, 256) x (256, 256) pieces: each
    # RHS piece is pushed once and loaded by the first LHS of its K step.
    m, k, n, rows, width = 64, 512, 256, 8, 256
    rng = np.random.default_rng(1234)
    rhs_shape = (n, k) if transpose else (k, n)
    if jnp.issubdtype(dtype, jnp.integer):
      x = rng.integers(-128, 128, size=(m, k)).astype(dtype)
      y = rng.integers(-128, 128, size=rhs_shape).astype(dtype)
      out_type = jnp.int32
    else:
      x = rng.normal(size=(m, k)).astype(dtype)
      y = rng.normal(size=rhs_shape).astype(dtype)
      out_type = jnp.float32

    def kernel(x_ref, y_ref, o_ref):
      o_ref[...] = jnp.zeros_like(o_ref)
      for j in range(k // width):
        if transpose:
          rhs = y_ref[:, j * width : (j + 1) * width]
        else:
          rhs = y_ref[j * width : (j + 1) * width, :]
        pltpu.matmul_push_rhs(
            rhs, staging_register=0, mxu_index=0, transpose=transpose
        )
        for l in range(m // rows):
          pltpu.matmul_lhs_fifo(
              x_ref[l * rows : (l + 1) * rows, j * width : (j + 1) * width],
              mxu_index=0,
              load_staged_rhs=0 if l == 0 else None,
          )
          o_ref[l * rows : (l + 1) * rows, :] += pltpu.matmul_pop_fifo(
              shape=(rows, n), dtype=out_type, mxu_index=0
          )

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), out_type),
        interpret=pltpu.InterpretParams(),
    )(x, y)

    rhs = y.T if transpose else y
    expected = np.matmul(
        x.astype(np.float64), rhs.astype(np.float64)
    ).astype(out_type)
    if out_type == jnp.int32:
      np.testing.assert_array_equal(out, expected)
    else:
      # float32 sums of 512 products, in another order than float64's.
      np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)

  # Older jax releases only: jax 0.11.2 and newer have no accumulator
  # addresses.
  def test_accumulate_in_two_slices_of_two_mxus(self):
    # Older jax releases: begin.
    if jax.__version_info__ >= (0, 11, 2):
      self.skipTest(
          'jax 0.11.2 and newer make accumulators refs (pltpu.ACC); their'
          ' series raise NotImplementedError for matmul_acc_lhs and matmul_pop'
      )
    # Older jax releases: end.
    # MXU 0 accumulates x0 @ y0 + x1 @ y0 (one load, reused) at address 0;
    # MXU 1 accumulates x0 @ y1 at address 8 and pops it twice: the second
    # pop finds the slice zeroed.
    rng = np.random.default_rng(0)
    x0, x1 = (rng.normal(size=(16, 256)).astype(np.float32) for _ in range(2))
    y0, y1 = (rng.normal(size=(256, 128)).astype(np.float32) for _ in range(2))

    def kernel(x0_ref, x1_ref, y0_ref, y1_ref, o_ref):
      pltpu.matmul_push_rhs(y0_ref[...], staging_register=1, mxu_index=0)
      pltpu.matmul_push_rhs(y1_ref[...], staging_register=1, mxu_index=1)
      pltpu.matmul_acc_lhs(0, x0_ref[...], mxu_index=0, load_staged_rhs=1)
      pltpu.matmul_acc_lhs(0, x1_ref[...], mxu_index=0)
      pltpu.matmul_acc_lhs(8, x0_ref[...], mxu_index=1, load_staged_rhs=1)
      o_ref[0] = pltpu.matmul_pop(0, (16, 128), jnp.float32, mxu_index=0)
      o_ref[1] = pltpu.matmul_pop(8, (16, 128), jnp.float32, mxu_index=1)
      o_ref[2] = pltpu.matmul_pop(8, (16, 128), jnp.float32, mxu_index=1)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((3, 16, 128), jnp.float32),
        interpret=pltpu.InterpretParams(),
    )(x0, x1, y0, y1)

    f64 = lambda a: a.astype(np.float64)
    np.testing.assert_allclose(
        out[0], f64(x0) @ f64(y0) + f64(x1) @ f64(y0), rtol=1e-5, atol=1e-4
    )
    np.testing.assert_allclose(
        out[1], f64(x0) @ f64(y1), rtol=1e-5, atol=1e-4
    )
    np.testing.assert_array_equal(out[2], np.zeros((16, 128), np.float32))

  def test_pop_from_empty_fifo_fails(self):
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 1):
      self.skipTest('jax 0.11.0 has no matmul_lhs_fifo or matmul_pop_fifo')
    # Older jax releases: end.
    def kernel(x_ref, y_ref, o_ref):
      pltpu.matmul_push_rhs(y_ref[...], staging_register=0, mxu_index=0)
      pltpu.matmul_lhs_fifo(x_ref[...], mxu_index=0, load_staged_rhs=0)
      for i in range(2):  # One pop too many.
        o_ref[i] = pltpu.matmul_pop_fifo((8, 128), jnp.float32, mxu_index=0)

    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        interpret=pltpu.InterpretParams(),
    )
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        'Cannot schedule FIFO pop instruction when the FIFO is empty',
    ):
      jax.block_until_ready(
          f(jnp.ones((8, 256), jnp.float32), jnp.ones((256, 128), jnp.float32))
      )
    test_util.reset_after_failure()

  def test_push_to_a_full_staging_register_fails(self):
    def kernel(y_ref, o_ref):
      pltpu.matmul_push_rhs(y_ref[...], staging_register=0, mxu_index=0)
      pltpu.matmul_push_rhs(y_ref[...], staging_register=0, mxu_index=0)
      o_ref[...] = jnp.zeros_like(o_ref)

    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        interpret=pltpu.InterpretParams(),
    )
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        'matmul_push_rhs to staging register 0, which already holds a RHS',
    ):
      jax.block_until_ready(f(jnp.ones((256, 128), jnp.float32)))
    test_util.reset_after_failure()


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
