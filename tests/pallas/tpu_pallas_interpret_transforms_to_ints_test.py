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

"""Tests of how TPU interpret mode converts the indices of ref transforms.

The interpreter's callbacks get the transforms of a ref with NumPy scalars
for their dynamic indices; `interpret_utils.transforms_to_ints` converts
them to Python ints as `jax.tree.map(int, ...)` does, without flattening the
`NDIndexer`s as pytrees. The expected values are `jax.tree.map`'s and
numpy's.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax._src import test_util as jtu
from jax._src.state import indexing
from jax._src.state import types as state_types
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np
import tpu_interpret_test_util as test_util
from tpu_interpret_test_util import mosaic_interpret


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretTransformsToIntsTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    utils = getattr(mosaic_interpret, 'interpret_utils', None)
    if not hasattr(utils, 'transforms_to_ints'):
      self.skipTest(
          'jax 0.10.x and older: their series have no transforms_to_ints'
      )
    # Older jax releases: end.

  def _transforms_indexer(self, *indices, shape=(16, 256)):
    return indexing.NDIndexer(indices, shape, int_indexer_shape=())

  def _transforms_tree(self, name):
    """A pytree of transforms as the interpreter's callbacks get them."""
    np_int = np.int32
    slices = self._transforms_indexer(
        indexing.Slice(np_int(8), np_int(8)), indexing.Slice(np_int(0), 128, 2)
    )
    trees = {
        'none': None,
        'empty': (),
        'slices': (slices,),
        'scalar_index': (
            self._transforms_indexer(
                np.array(3, np_int), indexing.Slice(0, 256)
            ),
        ),
        'ints_already': (self._transforms_indexer(indexing.Slice(8, 8), 5),),
        'two_indexers': (
            slices,
            self._transforms_indexer(
                np_int(2), indexing.Slice(np_int(16), 64), shape=(8, 256)
            ),
        ),
        'list_and_none': [(slices,), None],
        'view': (slices, state_types.ReshapeTransform((8, 2, 32))),
    }
    return trees[name]

  @parameterized.parameters(
      'none', 'empty', 'slices', 'scalar_index', 'ints_already',
      'two_indexers', 'list_and_none', 'view',
  )
  def test_same_as_tree_map(self, name):
    tree = self._transforms_tree(name)
    expected = jax.tree.map(int, tree)
    got = mosaic_interpret.interpret_utils.transforms_to_ints(tree)
    self.assertEqual(got, expected)
    self.assertEqual(
        jax.tree.structure(got), jax.tree.structure(expected)
    )
    for leaf in jax.tree.leaves(got):
      self.assertIs(type(leaf), int)
    # A Slice keeps its static stride; every start and size is an int.
    for transform in jax.tree.leaves(
        got, is_leaf=lambda x: isinstance(x, indexing.NDIndexer)
    ):
      if isinstance(transform, indexing.NDIndexer):
        for index in transform.indices:
          if isinstance(index, indexing.Slice):
            self.assertIs(type(index.start), int)
            self.assertIs(type(index.size), int)
          else:
            self.assertIs(type(index), int)

  def test_int_indexer_is_kept(self):
    indexer = self._transforms_indexer(
        indexing.Slice(8, 8), indexing.Slice(0, 256)
    )
    (got,) = mosaic_interpret.interpret_utils.transforms_to_ints((indexer,))
    self.assertIs(got, indexer)

  def test_advanced_indexer_raises_as_int(self):
    tree = (
        self._transforms_indexer(
            np.array([1, 2], np.int32), indexing.Slice(0, 256)
        ),
    )
    with self.assertRaises(TypeError):
      jax.tree.map(int, tree)
    with self.assertRaises(TypeError):
      mosaic_interpret.interpret_utils.transforms_to_ints(tree)

  def test_dynamic_and_strided_indices_in_kernel(self):
    # Loads and stores at indices computed from the grid and a loop carry,
    # with a strided slice: each callback converts NumPy indices.
    def kernel(x_ref, o_ref):
      i = pl.program_id(0)

      def body(j, carry):
        row = x_ref[pl.ds(2 * j + i % 2, 1), pl.ds(0, 64, stride=2)]
        o_ref[pl.ds(j, 1), :] = row + carry
        return carry + 1.0

      jax.lax.fori_loop(0, 4, body, jnp.float32(0))

    x = np.arange(3 * 8 * 128, dtype=np.float32).reshape(3 * 8, 128)
    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((3 * 4, 64), jnp.float32),
        grid=(3,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((4, 64), lambda i: (i, 0)),
        interpret=pltpu.InterpretParams(),
    )(x)

    expected = np.zeros((3 * 4, 64), np.float32)
    for i in range(3):
      block = x[8 * i:8 * (i + 1)]
      for j in range(4):
        expected[4 * i + j] = block[2 * j + i % 2, 0:128:2] + j
    np.testing.assert_array_equal(out, expected)


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
