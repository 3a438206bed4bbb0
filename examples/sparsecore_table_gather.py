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

"""The subcores of a SparseCore look up rows of an embedding table together.

The standard SparseCore pattern (jax issues #39518, #34640, #39621), on a
TPU v6e's 2 SparseCores of 16 vector subcores each:

1. Subcore 0 of each SparseCore copies the embedding table from HBM into
   `VMEM_SHARED`, the memory that the subcores of one SparseCore share.
2. `plsc.subcore_barrier()`: every subcore waits until all subcores of its
   SparseCore are there, so the table is complete before anyone reads it.
3. Each subcore gathers its rows of the table, one per lookup id, with a DMA
   from `VMEM_SHARED` into its private `VMEM`, and writes them to its slice
   of the output. It also gathers one column of its rows with
   `plsc.load_gather` (8 lanes, one element per lane), for a second check.

Every (SparseCore, subcore) pair runs, concurrently, each with its own
`jax.lax.axis_index('core')` and `axis_index('subcore')`. The expected
values are numpy's `table[ids]` and `np.take`. Race detection is on: the
barrier orders subcore 0's writes of the table before the other subcores'
reads, so it finds no race.

This runs on CPU in TPU interpret mode with a jax whose interpreter runs
SparseCore meshes (the patch series' 0007, jax 0.10.0 and newer).
"""

import sys

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import tpu_sc as plsc
import jax.numpy as jnp
import numpy as np

import _report
from _report import mosaic_interpret

FEATURE = ('SparseCore: 2 SparseCores x 16 subcores gather rows of a table'
           ' in VMEM_SHARED after plsc.subcore_barrier')

VOCAB = 64  # Rows of the embedding table.
DIM = 8  # Its columns: one vector of 8 lanes.
LOOKUPS_PER_SUBCORE = 8  # One lookup id per lane.


def embedding_lookup(
    table: jax.Array, ids: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """Looks up `ids` in `table`, split over every subcore of the chip.

  Args:
    table: f32[VOCAB, DIM], the embedding table.
    ids: i32[cores, subcores, LOOKUPS_PER_SUBCORE], the rows to look up, each
      subcore its own.

  Returns:
    A tuple of
    - rows: f32[cores, subcores, LOOKUPS_PER_SUBCORE, DIM], `table[ids]`.
    - column: f32[cores, subcores, LOOKUPS_PER_SUBCORE], column
      `subcore % DIM` of those rows, gathered with `plsc.load_gather`.
  """
  num_cores, num_subcores, _ = ids.shape
  mesh = plsc.VectorSubcoreMesh(
      core_axis_name='core', subcore_axis_name='subcore', num_cores=num_cores
  )

  @_report.kernel(
      out_type=(
          jax.ShapeDtypeStruct(
              (num_cores, num_subcores, LOOKUPS_PER_SUBCORE, DIM), jnp.float32
          ),
          jax.ShapeDtypeStruct(
              (num_cores, num_subcores, LOOKUPS_PER_SUBCORE), jnp.float32
          ),
      ),
      mesh=mesh,
      scratch_types=[
          pltpu.VMEM_SHARED((VOCAB, DIM), jnp.float32),  # The shared table.
          pltpu.VMEM((LOOKUPS_PER_SUBCORE,), jnp.int32),  # This subcore's ids.
          pltpu.VMEM((LOOKUPS_PER_SUBCORE, DIM), jnp.float32),  # Its rows.
          pltpu.VMEM((LOOKUPS_PER_SUBCORE,), jnp.float32),  # Its column.
      ],
      interpret=_report.interpret_params(detect_races=True),
  )
  def kernel(table_hbm, ids_hbm, rows_hbm, column_hbm,
             table_shared, ids_vmem, rows_vmem, column_vmem):
    core = lax.axis_index('core')
    subcore = lax.axis_index('subcore')

    @pl.when(subcore == 0)
    def _():
      pltpu.sync_copy(table_hbm, table_shared)

    pltpu.sync_copy(ids_hbm.at[core, subcore], ids_vmem)
    # The table is complete once every subcore of this SparseCore is here.
    plsc.subcore_barrier()

    # A vector subcore loads its VMEM by vectors (Mosaic lowers no scalar
    # load from VMEM): the ids as one vector, then each id from it.
    ids = ids_vmem[...]
    for i in range(LOOKUPS_PER_SUBCORE):
      pltpu.sync_copy(table_shared.at[ids[i]], rows_vmem.at[i])
    pltpu.sync_copy(rows_vmem, rows_hbm.at[core, subcore])

    lanes = lax.broadcasted_iota(jnp.int32, (LOOKUPS_PER_SUBCORE,), 0)
    column_vmem[...] = plsc.load_gather(
        rows_vmem, [lanes, jnp.full_like(lanes, subcore % DIM)]
    )
    pltpu.sync_copy(column_vmem, column_hbm.at[core, subcore])

  return kernel(table, ids)


def run() -> list[_report.Row]:
  """Runs the kernel and returns (name, result, expected) rows."""
  reason = _report.sparsecore_unsupported()
  if reason is not None:
    raise _report.Unsupported(reason)
  with _report.tpu_v6e():
    info = plsc.get_sparse_core_info()
    kt, ki = jax.random.split(jax.random.key(0))
    table = jax.random.normal(kt, (VOCAB, DIM), jnp.float32)
    ids = jax.random.randint(
        ki, (info.num_cores, info.num_subcores, LOOKUPS_PER_SUBCORE), 0, VOCAB
    )
    rows, column = jax.block_until_ready(embedding_lookup(table, ids))

  table_np, ids_np = np.asarray(table), np.asarray(ids)
  rows_np = table_np[ids_np]
  cols = np.arange(info.num_subcores) % DIM
  column_np = np.take_along_axis(
      rows_np,
      np.broadcast_to(
          cols[None, :, None, None], rows_np.shape[:3] + (1,)
      ),
      axis=3,
  )[..., 0]
  return [
      ('rows gathered from VMEM_SHARED', np.asarray(rows), rows_np),
      ('column via plsc.load_gather', np.asarray(column), column_np),
      ('races found', np.array(mosaic_interpret.races.races_found),
       np.array(False)),
  ]


if __name__ == '__main__':
  sys.exit(_report.main(run, FEATURE))
