"""The memory a kernel's large input costs, for the memory figure.

Runs on stock and on patched jax alike: a `pallas_call` whose input, of
`INPUT_MIB[size]` MiB of bfloat16 in `pl.ANY`, is indexed by a scalar
prefetch operand and a sixth of it copied by one DMA (upstream's
`test_large_array_indexing` in `tests/pallas/tpu_pallas_test.py`, whose
input is 6 GiB), interpreted on CPU. The process's peak resident
memory (`ru_maxrss`) is read before the first call, with the input already
on the device, and after it (compilation included), and the NumPy memory
that the call holds at once (`tracemalloc`, which NumPy reports to) during
the second call. Each call's output is checked against numpy.

Prints `{"input_bytes": N, "rss_increase": bytes, "numpy_peak": bytes}`.
"""

import resource
import tracemalloc

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

import _common

INPUT_MIB = {'quick': 96, 'default': 384}


def main() -> None:
  args = _common.parse_args()
  n = 6
  rows = INPUT_MIB[args.size] * 2**20 // (n * 512 * 2)
  x = jax.lax.broadcasted_iota(jnp.bfloat16, (n, rows, 512), 0)
  jax.block_until_ready(x)

  def kernel(index, x_hbm, y_hbm, sem):
    pltpu.async_copy(x_hbm.at[index[0]], y_hbm.at[:], sem).wait()

  run = pl.pallas_call(
      kernel,
      grid_spec=pltpu.PrefetchScalarGridSpec(
          num_scalar_prefetch=1,
          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
          out_specs=pl.BlockSpec(memory_space=pl.ANY),
          scratch_shapes=[pltpu.SemaphoreType.DMA],
      ),
      out_shape=jax.ShapeDtypeStruct((rows, 512), jnp.bfloat16),
      interpret=pltpu.InterpretParams(),
  )
  before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  y = jax.block_until_ready(run(jnp.array([1], jnp.int32), x))
  after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  np.testing.assert_array_equal(np.asarray(y, np.float32), 1.0)
  del y
  tracemalloc.start()
  y = jax.block_until_ready(run(jnp.array([2], jnp.int32), x))
  _, numpy_peak = tracemalloc.get_traced_memory()
  tracemalloc.stop()
  np.testing.assert_array_equal(np.asarray(y, np.float32), 2.0)
  _common.emit({'input_bytes': x.nbytes,
                'rss_increase': (after - before) * 1024,  # ru_maxrss: KiB.
                'numpy_peak': numpy_peak})


if __name__ == '__main__':
  main()
