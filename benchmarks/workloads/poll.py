"""A polling loop: the non-decrementing wait against today's workaround.

Needs patched jax. Every core signals its own REGULAR semaphore once, then
polls it `n` times, either with

- `nondecrementing`: `pl.semaphore_wait(sem, 1, decrement=False)`, or
- `workaround`: `pl.semaphore_wait(sem, 1)` followed by
  `pl.semaphore_signal(sem, 1)` (what kernels do without the patch),

and finally consumes the count. For reference, `signal_only` loops over
`pl.semaphore_signal(sem, 1)` alone: the cost of the callback that the
non-decrementing wait saves. Each variant is also compiled with `n = 0`,
so that the cost of one poll is `(t(n) - t(0)) / n`, free of the kernel's
fixed cost. Runs on 1 and on 4 cores.

Prints `{"n": n, "wall": {"<variant>_<cores>c_n<n>": [seconds, ...]},
"cpu": {...}}`.
"""

from collections.abc import Callable

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

import _common

VARIANTS = ('nondecrementing', 'workaround', 'signal_only')
CORES = (1, 4)
POLLS = {'quick': 100, 'default': 200}


def polling_kernel(
    variant: str, num_cores: int, n: int
) -> Callable[[], object]:
  """Returns a function running the polling kernel, blocking until done.

  Args:
    variant: One of `VARIANTS`.
    num_cores: Cores of the `pltpu.TensorCoreMesh`.
    n: Polls per core.
  """
  mesh = pltpu.TensorCoreMesh(axis_name='core', num_cores=num_cores)

  @pl.kernel(
      out_type=jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.int32),
      mesh=mesh,
      scratch_types=[pltpu.VMEM((8, 128), jnp.int32),
                     pltpu.SemaphoreType.REGULAR],
      interpret=pltpu.InterpretParams(
          allow_non_decrementing_semaphore_wait=True,
      ),
  )
  def kernel(o_hbm, buf, sem):
    core = lax.axis_index('core')
    pl.semaphore_signal(sem, 1)

    def poll(i, carry):
      if variant == 'nondecrementing':
        pl.semaphore_wait(sem, 1, decrement=False)
      elif variant == 'workaround':
        pl.semaphore_wait(sem, 1)
        pl.semaphore_signal(sem, 1)
      else:
        pl.semaphore_signal(sem, 1)
      return carry + 1

    polls = lax.fori_loop(0, n, poll, jnp.int32(0))
    pl.semaphore_wait(sem, 1 + (n if variant == 'signal_only' else 0))
    buf[...] = jnp.full((8, 128), polls + 1000 * core, jnp.int32)
    pltpu.sync_copy(buf, o_hbm.at[core])

  f = jax.jit(kernel)
  expected = np.arange(num_cores)[:, None, None] * 1000 + n
  np.testing.assert_array_equal(
      f(), np.broadcast_to(expected, (num_cores, 8, 128)))
  return lambda: jax.block_until_ready(f())


def main():
  args = _common.parse_args()
  n = POLLS[args.size]
  fns = {}
  for cores in CORES:
    for variant in VARIANTS:
      for polls in (0, n):
        fns[f'{variant}_{cores}c_n{polls}'] = polling_kernel(
            variant, cores, polls)
  _common.emit({'n': n, **_common.time_interleaved(fns, args.repeats)})


if __name__ == '__main__':
  main()
