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

"""Tests for SparseCore `plsc.pack` and `plsc.unpack`.

They have no CPU lowering; TPU interpret mode evaluates them with
jax.numpy. The expected values are computed here with numpy, from the
layouts `plsc.PackFormat` documents. The kernels run on subcore 0 of a TPU v6e
SparseCore (vectors of 8 lanes), described by an abstract mesh, on CPU.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import tpu_sc as plsc
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretSparseCorePackTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    if jax.__version_info__ < (0, 11, 0):
      self.skipTest(
          'jax 0.10.2 and older: their series have no patch for SparseCore'
          ' pack and unpack'
      )
    # Older jax releases: end.

  def _run_pack_kernel(self, body, inputs, out_types):
    """Runs `body` on subcore 0 of a SparseCore; returns its outputs.

    Args:
      body: Takes the inputs' values, vectors of 8 lanes, and returns the
        outputs' values.
      inputs: 1-D numpy arrays of 8 elements.
      out_types: `jax.ShapeDtypeStruct`s of the outputs.
    """
    self.enter_context(jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=test_util.tpu_v6e())))
    num_inputs = len(inputs)

    @test_util.kernel(
        out_type=tuple(out_types),
        mesh=plsc.VectorSubcoreMesh(
            core_axis_name='core', subcore_axis_name='subcore', num_cores=1
        ),
        scratch_types=(
            *(pltpu.VMEM(x.shape, x.dtype) for x in inputs),
            *(pltpu.VMEM(t.shape, t.dtype) for t in out_types),
        ),
        interpret=test_util.interpret_params(),
    )
    def kernel(*refs):
      hbm, vmem = refs[:len(refs) // 2], refs[len(refs) // 2:]

      @pl.when(jax.lax.axis_index('subcore') == 0)
      def _():
        for src, dst in zip(hbm[:num_inputs], vmem[:num_inputs]):
          pltpu.sync_copy(src, dst)
        outs = body(*(ref[...] for ref in vmem[:num_inputs]))
        for ref, out in zip(vmem[num_inputs:], outs):
          ref[...] = out
        for src, dst in zip(vmem[num_inputs:], hbm[num_inputs:]):
          pltpu.sync_copy(src, dst)

    return [np.asarray(o) for o in jax.block_until_ready(kernel(*inputs))]

  @parameterized.product(
      format=('INTERLEAVED', 'COMPRESSED'),
      dtype=(np.float32, np.int32),
  )
  def test_pack(self, format, dtype):
    format = plsc.PackFormat[format]
    # Exactly representable in bfloat16 and int16, so that the values check
    # only the layout.
    a = np.array([0, 1, -2, 3, 100, -128, 7, 255], dtype)
    b = np.array([-1, 5, 6, -7, 64, 9, -255, 2], dtype)
    packed_dtype = jnp.bfloat16 if dtype == np.float32 else np.int16
    shape = (16,) if format == plsc.PackFormat.INTERLEAVED else (8, 2)
    [out] = self._run_pack_kernel(
        lambda a, b: [plsc.pack(a, b, format=format)],
        [a, b],
        [jax.ShapeDtypeStruct(shape, packed_dtype)],
    )
    if format == plsc.PackFormat.INTERLEAVED:
      expected = np.stack([a, b], axis=-1).reshape(16)
    else:
      expected = np.concatenate([a, b]).reshape(8, 2)
    np.testing.assert_array_equal(out, expected.astype(packed_dtype))

  @parameterized.parameters('INTERLEAVED', 'COMPRESSED')
  def test_pack_int32_keeps_the_low_bits(self, format):
    format = plsc.PackFormat[format]
    a = np.array([2**16 + 1, -1, 2**15, 70000, 0, 3, -70000, 2**31 - 1],
                 np.int32)
    b = -a
    shape = (16,) if format == plsc.PackFormat.INTERLEAVED else (8, 2)
    [out] = self._run_pack_kernel(
        lambda a, b: [plsc.pack(a, b, format=format)],
        [a, b],
        [jax.ShapeDtypeStruct(shape, np.int16)],
    )
    low = lambda x: (x & 0xFFFF).astype(np.uint16).view(np.int16)
    if format == plsc.PackFormat.INTERLEAVED:
      expected = np.stack([low(a), low(b)], axis=-1).reshape(16)
    else:
      expected = np.concatenate([low(a), low(b)]).reshape(8, 2)
    np.testing.assert_array_equal(out, expected)

  @parameterized.product(
      format=('INTERLEAVED', 'COMPRESSED'),
      dtype=(np.float32, np.int32),
  )
  def test_unpack_inverts_pack(self, format, dtype):
    format = plsc.PackFormat[format]
    a = np.array([0, 1, -2, 3, 100, -128, 7, 255], dtype)
    b = -a - 1

    def body(a, b):
      return plsc.unpack(plsc.pack(a, b, format=format), format=format)

    out_a, out_b = self._run_pack_kernel(
        body, [a, b], [jax.ShapeDtypeStruct((8,), dtype)] * 2
    )
    np.testing.assert_array_equal(out_a, a)
    np.testing.assert_array_equal(out_b, b)

  def test_unpack_sign_extends_int16(self):
    ab = np.array([-1, 2, -32768, 32767, 5, -6, 0, -300] * 2, np.int16)
    out_a, out_b = self._run_pack_kernel(
        lambda ab: plsc.unpack(ab, format=plsc.PackFormat.INTERLEAVED),
        [ab],
        [jax.ShapeDtypeStruct((8,), np.int32)] * 2,
    )
    np.testing.assert_array_equal(out_a, ab[0::2].astype(np.int32))
    np.testing.assert_array_equal(out_b, ab[1::2].astype(np.int32))


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
