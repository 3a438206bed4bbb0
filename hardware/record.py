"""Records what a TPU computes for small kernels whose semantics it decides.

Run on a TPU (one program, so the chip is opened once):

    python hardware/record.py -o hardware/recordings/tpu_v5_lite.json

`--kinds` records some kinds only; `--isolate` runs each case in a process
of its own (each opens the chip, about 10 s), so that a case whose compiler
aborts the process is recorded as an error and the others still run
(`hardware/recordings/tpu_v5_lite_pipeline_grid.json`: `--kinds
pipeline_grid --isolate`).

With `--interpret` the same kernels run in TPU interpret mode on CPU (with
`matmul_precision="tpu"` where the installed jax has it) and the file
records that instead (to compare by hand; the tests compare with
the committed recording: `tests/hardware_parity_test.py`).

What is recorded (each entry: the case's parameters and its result):

- `dma_semaphore`: the value of a DMA semaphore after one copy, for copies
  of several shapes and dtypes between memory spaces: `[the largest value read
  while polling it 2000 times after start(), the value after that, the
  value after wait()]`.
- `stochastic_round`: `pltpu.stochastic_round` of float32 to bfloat16 of
  1024 elements `x = sign(f) * (1 + |f| * 2**-7)` with random bits
  `i << shift` in element `i`: the indices of the elements rounded away
  from zero.
- `elementwise`: an operation of `ELEMENTWISE_CASES` on edge values (integer
  overflow, division by zero, shifts by 32 and more, float to integer
  conversion of NaN and out-of-range values, subnormals, bfloat16
  arithmetic, NaN in min/max and reductions, transcendentals) in an
  (8, 128) block in VMEM: the bit patterns of the results, as unsigned
  integers.
- `layout`: operations of `LAYOUT_CASES` whose result places elements
  (`pltpu.bitcast` between widths, `pltpu.roll` with and without a stride,
  `jnp.roll`), and bit counts (`lax.clz`, `lax.population_count`) and
  rounding (`jnp.round`, `jnp.floor`): the bit patterns of the whole result.
- `prng`: `pltpu.prng_seed(seed)` then two `pltpu.prng_random_bits` of
  (8, 128), seeded again, one more: the three draws' bits (the TPU's bits
  are not reproduced in interpret mode; their statistics are compared).
- `scalar`: operations of `SCALAR_CASES` on int32 and float32 scalars in
  SMEM, on the TPU's scalar unit (division, remainder and shifts of edge
  values, float to int conversions): the bit patterns of the results.
- `matmul`: `jnp.dot` of (8, 128) by (128, 128) int8, bfloat16 and float32
  blocks at the default, high and highest precision: the bit patterns of
  the (8, 128) result.
- `semaphore`: signals and waits of `SEMAPHORE_CASES` on an array of two
  REGULAR semaphores: both counts after each.
- `pack`: `pltpu.pack_elementwise` and `pltpu.unpack_elementwise` of
  `PACK_CASES` (rounding, NaN, infinities, subnormals, integers out of the
  packed range): the bit patterns of the whole result.
- `masked`: masked stores and loads of `MASKED_CASES`: the bits of the
  whole buffer after the store (or of the loaded value).
- `revisit`: pallas_calls of `REVISIT_CASES` whose output block stays the
  same over consecutive grid steps (accumulating, writing on the first
  visit only, on every visit): the bits of the output.
- `pipeline`: `pltpu.emit_pipeline` of `PIPELINE_CASES` over HBM operands:
  the bits of the output.
- `pipeline_grid`: `pltpu.emit_pipeline` of `PIPELINE_GRID_CASES`, with and
  without `jax_use_emit_pipeline_primitive`, whose body adds what
  `pl.program_id` and `pl.num_programs` give for every axis of the
  pipeline's grid, in kernels with and without a grid: the bits of the
  output.
- `reject`: kernels of `REJECT_CASES` that Mosaic may reject (256 MiB of
  VMEM, a non-decrementing wait, an unaligned dynamic lane slice, int16
  scalar arithmetic, a uint8 matmul): the error's class and first line, or
  the output's first element where the kernel ran.

The file also records the jax and jaxlib versions, the device kind and the
date. Cases run one by one and the file is rewritten after each, so a case
that fails or hangs leaves the ones before it recorded (its entry says
what went wrong).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import traceback

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

# (source, destination, shape, dtype) of each DMA: memory spaces 'hbm',
# 'vmem', 'smem'.
DMA_CASES = tuple(('hbm',) + case for case in (
    ('vmem', (8, 128), 'float32'),
    ('vmem', (64, 128), 'float32'),
    ('vmem', (16, 128), 'bfloat16'),
    ('vmem', (32, 128), 'int8'),
    ('vmem', (1, 128), 'float32'),
    ('vmem', (8, 256), 'float32'),
    ('vmem', (3, 128), 'float32'),
    ('hbm', (8, 128), 'float32'),
    ('hbm', (1, 128), 'float32'),
    ('hbm', (3, 128), 'float32'),
    ('vmem', (1, 128), 'bfloat16'),
    ('vmem', (1, 128), 'int8'),
    ('vmem', (8, 64), 'float32'),
    ('vmem', (8, 1), 'float32'),
    ('hbm', (1, 8), 'float32'),
    ('hbm', (1, 1), 'float32'),
    ('hbm', (5,), 'int32'),
    ('hbm', (1000,), 'int32'),
    ('smem', (2048,), 'int32'),
    ('smem', (1024,), 'int32'),
    ('smem', (256,), 'int32'),
    ('smem', (128,), 'int32'),
    ('smem', (64,), 'int32'),
    ('smem', (16,), 'int32'),
    ('smem', (8,), 'int32'),
    ('smem', (3,), 'int32'),
    ('smem', (1,), 'int32'),
    ('smem', (8, 128), 'int32'),
    ('smem', (2,), 'float32'),
    ('vmem', (5, 128), 'bfloat16'),
    ('vmem', (3, 64), 'float32'),
    ('vmem', (8, 200), 'float32'),
    ('vmem', (2, 8, 128), 'float32'),
    ('vmem', (2, 3, 128), 'float32'),
    ('vmem', (256,), 'float32'),
    ('vmem', (9, 128), 'int8'),
    ('hbm', (2, 3, 5), 'float32'),
    ('hbm', (300, 7), 'int32'),
    ('vmem', (2, 128), 'bfloat16'),
    ('vmem', (3, 128), 'bfloat16'),
    ('vmem', (7, 128), 'bfloat16'),
    ('vmem', (8, 128), 'bfloat16'),
    ('vmem', (9, 128), 'bfloat16'),
    ('vmem', (17, 128), 'bfloat16'),
    ('vmem', (2, 5, 128), 'bfloat16'),
    ('vmem', (8, 64), 'bfloat16'),
    ('vmem', (2, 128), 'int8'),
    ('vmem', (5, 128), 'int8'),
    ('vmem', (16, 128), 'int8'),
    ('vmem', (17, 128), 'int8'),
    ('vmem', (33, 128), 'int8'),
    ('hbm', (300,), 'bfloat16'),
    ('hbm', (100,), 'int8'),
    ('hbm', (5, 128), 'bfloat16'),
    ('hbm', (9, 128), 'int8'),
    ('vmem', (4, 128), 'float32'),
    ('vmem', (7, 128), 'int32'),
)) + (
    ('vmem', 'hbm', (8, 128), 'float32'),
    ('vmem', 'hbm', (8, 64), 'float32'),
    ('vmem', 'hbm', (3, 128), 'float32'),
    ('vmem', 'vmem', (8, 128), 'float32'),
    ('vmem', 'vmem', (8, 64), 'float32'),
    ('vmem', 'vmem', (3, 64), 'float32'),
    ('smem', 'hbm', (8,), 'int32'),
    ('smem', 'smem', (8,), 'int32'),
    ('smem', 'smem', (1024,), 'int32'),
    ('vmem', 'smem', (8, 128), 'int32'),
)

# (shift, f) of each stochastic_round case.
STOCHASTIC_ROUND_CASES = (
    (22, 0.25), (22, 0.75),
    (13, 0.25), (13, 0.5), (13, 0.01), (13, -0.25),
    (12, 0.25), (12, 0.5), (12, 0.01),
    (0, 0.25), (0, 0.5), (0, 0.01),
)

_POLLS = 2000

_I32 = np.iinfo(np.int32)
INT32_EDGES = (0, 1, -1, 2, -2, 7, -7, 31, 32, 33, 100, -100, _I32.max,
               _I32.min, _I32.max - 1, _I32.min + 1)
FLOAT32_EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1.5, 2.5, 3e9, -3e9,
                 2.0**31, -(2.0**31), float('inf'), float('-inf'),
                 float('nan'), 1e-45, -1e-40, 1.2e-38, 3.4e38, 1 / 3)
BFLOAT16_EDGES = (0.0, 1.0, -1.0, 1.0078125, 3.0, 1 / 3, 255.0, 256.0,
                  1e-38, 3e38, float('inf'), float('nan'), -0.5, 1e-40)


def _pairs(edges, dtype):
  """All pairs of `edges` as two (8, 128) arrays (the rest zeros)."""
  n = len(edges)
  a = np.zeros(1024, dtype)
  b = np.zeros(1024, dtype)
  a[:n * n] = np.repeat(np.array(edges, dtype), n)
  b[:n * n] = np.tile(np.array(edges, dtype), n)
  return [a.reshape(8, 128), b.reshape(8, 128)], n * n


def _one(edges, dtype):
  x = np.zeros(1024, dtype)
  x[:len(edges)] = np.array(edges, dtype)
  return [x.reshape(8, 128)], len(edges)


def _spread(lo, hi):
  """1024 float32 values from `lo` to `hi`, for transcendentals."""
  return [np.linspace(lo, hi, 1024, dtype=np.float32).reshape(8, 128)], 1024


def _with_nan_rows():
  x = np.arange(1024, dtype=np.float32).reshape(8, 128) - 500
  x[1, 5] = np.nan
  x[3, :] = np.nan
  x[5, 7] = -np.inf
  return [x], 8


def _reduce_rows(fn):
  def reduce(x):
    r = fn(x, axis=1, keepdims=True)
    return jnp.broadcast_to(r, x.shape)
  return reduce


# name: (operation on the values of the inputs, a function giving the
# inputs and how many elements of the result they fill).
ELEMENTWISE_CASES = {
    'add_int32': (lax.add, lambda: _pairs(INT32_EDGES, np.int32)),
    'sub_int32': (lax.sub, lambda: _pairs(INT32_EDGES, np.int32)),
    'mul_int32': (lax.mul, lambda: _pairs(INT32_EDGES, np.int32)),
    'div_int32': (lax.div, lambda: _pairs(INT32_EDGES, np.int32)),
    'rem_int32': (lax.rem, lambda: _pairs(INT32_EDGES, np.int32)),
    'shift_left_int32': (lax.shift_left,
                         lambda: _pairs(INT32_EDGES, np.int32)),
    'shift_right_logical_int32': (
        lax.shift_right_logical, lambda: _pairs(INT32_EDGES, np.int32)),
    'shift_right_arithmetic_int32': (
        lax.shift_right_arithmetic, lambda: _pairs(INT32_EDGES, np.int32)),
    'div_uint32': (lax.div, lambda: _pairs(
        np.array(INT32_EDGES, np.int32).view(np.uint32), np.uint32)),
    'rem_uint32': (lax.rem, lambda: _pairs(
        np.array(INT32_EDGES, np.int32).view(np.uint32), np.uint32)),
    'float32_to_int32': (lambda x: x.astype(jnp.int32),
                         lambda: _one(FLOAT32_EDGES, np.float32)),
    'float32_to_uint32': (lambda x: x.astype(jnp.uint32),
                          lambda: _one(FLOAT32_EDGES, np.float32)),
    'int32_to_float32': (lambda x: x.astype(jnp.float32),
                         lambda: _one(INT32_EDGES, np.int32)),
    'float32_to_bfloat16': (lambda x: x.astype(jnp.bfloat16),
                            lambda: _one(FLOAT32_EDGES + (1.00390625,
                                                          1.01171875),
                                         np.float32)),
    'add_float32': (lax.add, lambda: _pairs(FLOAT32_EDGES, np.float32)),
    'mul_float32': (lax.mul, lambda: _pairs(FLOAT32_EDGES, np.float32)),
    'div_float32': (lax.div, lambda: _pairs(FLOAT32_EDGES, np.float32)),
    'max_float32': (jnp.maximum, lambda: _pairs(FLOAT32_EDGES, np.float32)),
    'min_float32': (jnp.minimum, lambda: _pairs(FLOAT32_EDGES, np.float32)),
    'add_bfloat16': (lax.add, lambda: _pairs(BFLOAT16_EDGES, jnp.bfloat16)),
    'mul_bfloat16': (lax.mul, lambda: _pairs(BFLOAT16_EDGES, jnp.bfloat16)),
    'max_reduce_float32': (_reduce_rows(jnp.max), _with_nan_rows),
    'min_reduce_float32': (_reduce_rows(jnp.min), _with_nan_rows),
    'sum_reduce_float32': (_reduce_rows(jnp.sum), _with_nan_rows),
    'exp_float32': (jnp.exp, lambda: _spread(-100, 100)),
    'log_float32': (jnp.log, lambda: _spread(1e-3, 1e6)),
    'tanh_float32': (jnp.tanh, lambda: _spread(-10, 10)),
    'sqrt_float32': (jnp.sqrt, lambda: _spread(0, 1e4)),
    'rsqrt_float32': (lax.rsqrt, lambda: _spread(1e-3, 1e4)),
    'sin_float32': (jnp.sin, lambda: _spread(-10, 10)),
}

def _quarters():
  """-128 to 127.75 in steps of 0.25: halves to round, as float32."""
  return [((np.arange(1024) - 512) / 4).astype(np.float32).reshape(8, 128)]


def _iota(shape, dtype):
  x = np.arange(np.prod(shape)) * 2654435761 % 2**32
  return [x.astype(np.uint32).view(np.int32).reshape(shape).astype(dtype)]


# name: (operation on the values of the inputs, a function giving the
# inputs); the whole result is recorded.
LAYOUT_CASES = {
    'bitcast_int32_to_bfloat16': (
        lambda x: pltpu.bitcast(x, jnp.bfloat16),
        lambda: _iota((8, 128), np.int32)),
    'bitcast_int32_to_int8': (
        lambda x: pltpu.bitcast(x, jnp.int8),
        lambda: _iota((8, 128), np.int32)),
    'bitcast_bfloat16_to_int32': (
        lambda x: pltpu.bitcast(x, jnp.int32),
        lambda: [_iota((16, 128), np.int32)[0].astype(np.uint16).view(
            jnp.bfloat16)]),
    'roll_lanes_by_3': (lambda x: pltpu.roll(x, 3, 1),
                        lambda: _iota((8, 128), np.int32)),
    'roll_sublanes_by_3': (lambda x: pltpu.roll(x, 3, 0),
                           lambda: _iota((8, 128), np.int32)),
    'roll_lanes_by_5_stride_1_over_sublanes': (
        lambda x: pltpu.roll(x, 5, 1, stride=1, stride_axis=0),
        lambda: _iota((8, 128), np.int32)),
    'jnp_roll_lanes_by_3': (lambda x: jnp.roll(x, 3, 1),
                            lambda: _iota((8, 128), np.int32)),
    'clz_int32': (lax.clz, lambda: _iota((8, 128), np.int32)),
    'population_count_int32': (lax.population_count,
                               lambda: _iota((8, 128), np.int32)),
    'round_float32': (jnp.round, _quarters),
    'round_away_float32': (
        lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
        _quarters),
    'floor_float32': (jnp.floor, _quarters),
}

_SCALAR_INT32 = (0, 1, -1, 7, -7, 31, 32, 33, _I32.max, _I32.min)
_SCALAR_FLOAT32 = (0.0, -0.0, 2.5, -2.5, 3e9, -3e9, float('inf'),
                   float('-inf'), float('nan'), 1e-40)

# name: (operation on two scalars or one, dtype of the inputs, edge values;
# a binary operation takes every pair of them).
SCALAR_CASES = {
    'div_int32': (lax.div, np.int32, _SCALAR_INT32),
    'rem_int32': (lax.rem, np.int32, _SCALAR_INT32),
    'shift_left_int32': (lax.shift_left, np.int32, _SCALAR_INT32),
    'shift_right_logical_int32': (lax.shift_right_logical, np.int32,
                                  _SCALAR_INT32),
    'shift_right_arithmetic_int32': (lax.shift_right_arithmetic, np.int32,
                                     _SCALAR_INT32),
    'float32_to_int32': (lambda x: x.astype(jnp.int32), np.float32,
                         _SCALAR_FLOAT32),
    'mul_float32': (lax.mul, np.float32, _SCALAR_FLOAT32),
}

# name: operations on a REGULAR semaphore array of two, each followed by a
# read of both: ('signal', index, value) or ('wait', index, value).
SEMAPHORE_CASES = {
    'signal_and_wait': (('signal', 0, 3), ('signal', 0, 5), ('wait', 0, 2),
                        ('wait', 0, 6)),
    'two_semaphores': (('signal', 1, 4), ('signal', 0, 1), ('wait', 1, 4),
                       ('signal', 1, 7), ('wait', 0, 1), ('wait', 1, 7)),
    'signal_zero': (('signal', 0, 0), ('signal', 0, 1), ('wait', 0, 1)),
    'large_counts': (('signal', 0, 2**20), ('signal', 0, 2**20),
                     ('wait', 0, 2**21 - 1), ('wait', 0, 1)),
}


def _pack_sources(dtype, count):
  """`count` (8, 128) arrays of `dtype`: float32 values whose low bits
  decide a rounding to bfloat16 (ties, NaN, infinities), or integers out of
  the packed range."""
  i = np.arange(1024, dtype=np.int64).reshape(8, 128)
  if dtype == 'float32':
    bits = (0x3F800000 + (i * 0x2A6B) % 0x20000) | ((i % 7 == 0) << 31)
    x = bits.astype(np.uint32).view(np.float32).copy()
    x[0, :4] = (np.nan, np.inf, -np.inf, 1e-40)
    x[0, 4:8] = np.array([0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x00000001],
                         np.uint32).view(np.float32)
    return [np.roll(x, k) for k in range(count)]
  x = (i * 2654435761 % 2**32).astype(np.uint32).view(np.int32)
  return [np.roll(x, k).astype(dtype) for k in range(count)]


# name: (the operation, a function giving its inputs); the whole result's
# bits are recorded.
PACK_CASES = {
    'pack_float32_to_bfloat16': (
        lambda *xs: pltpu.pack_elementwise(xs, packed_dtype=jnp.bfloat16),
        lambda: _pack_sources('float32', 2)),
    'pack_int32_to_int16': (
        lambda *xs: pltpu.pack_elementwise(xs, packed_dtype=jnp.int16),
        lambda: _pack_sources('int32', 2)),
    'pack_int32_to_int8': (
        lambda *xs: pltpu.pack_elementwise(xs, packed_dtype=jnp.int8),
        lambda: _pack_sources('int32', 4)),
    'unpack_bfloat16_to_float32_0': (
        lambda x: pltpu.unpack_elementwise(
            x, index=0, packed_dtype=jnp.bfloat16,
            unpacked_dtype=jnp.float32),
        lambda: _pack_sources('uint32', 1)),
    'unpack_bfloat16_to_float32_1': (
        lambda x: pltpu.unpack_elementwise(
            x, index=1, packed_dtype=jnp.bfloat16,
            unpacked_dtype=jnp.float32),
        lambda: _pack_sources('uint32', 1)),
    'unpack_int16_to_int32_1': (
        lambda x: pltpu.unpack_elementwise(
            x, index=1, packed_dtype=jnp.int16, unpacked_dtype=jnp.int32),
        lambda: _pack_sources('int32', 1)),
    'unpack_int8_to_int32_0': (
        lambda x: pltpu.unpack_elementwise(
            x, index=0, packed_dtype=jnp.int8, unpacked_dtype=jnp.int32),
        lambda: _pack_sources('int32', 1)),
    'unpack_int8_to_int32_3': (
        lambda x: pltpu.unpack_elementwise(
            x, index=3, packed_dtype=jnp.int8, unpacked_dtype=jnp.int32),
        lambda: _pack_sources('int32', 1)),
}


def _lane_below_37(shape):
  return lax.broadcasted_iota(jnp.int32, shape, len(shape) - 1) < 37


def _checkerboard(shape):
  return (lax.broadcasted_iota(jnp.int32, shape, 0)
          + lax.broadcasted_iota(jnp.int32, shape, 1)) % 2 == 0


def _row_below_5(shape):
  return lax.broadcasted_iota(jnp.int32, shape, 0) < 5


# name: (load or store, the buffer's shape, dtype, the mask as a function
# of the shape).
MASKED_CASES = {
    'store_float32_lanes': ('store', (8, 128), 'float32', _lane_below_37),
    'store_int32_checkerboard': ('store', (8, 128), 'int32', _checkerboard),
    'store_float32_rows': ('store', (16, 128), 'float32', _row_below_5),
    'store_bfloat16_rows': ('store', (16, 128), 'bfloat16', _row_below_5),
    'load_float32_lanes': ('load', (8, 128), 'float32', _lane_below_37),
    'load_int32_checkerboard': ('load', (8, 128), 'int32', _checkerboard),
}

# Revisited outputs: pallas_calls whose output block stays the same over
# consecutive grid steps. name: (grid, the kernel's body on (i, j, x block,
# output block)); the input is (8 * grid[0], 128 * grid[1]) float32, its
# block (8, 128) at (i, j), the output's (8, 128) at (i, 0).
def _accumulate(i, j, x_ref, o_ref):
  del i
  @pl.when(j == 0)
  def _():
    o_ref[...] = jnp.zeros_like(o_ref)
  o_ref[...] += x_ref[...]


def _write_first_visit(i, j, x_ref, o_ref):
  del i
  @pl.when(j == 0)
  def _():
    o_ref[...] = x_ref[...]


def _last_write_wins(i, j, x_ref, o_ref):
  del i, j
  o_ref[...] = x_ref[...] * 2


def _running_max(i, j, x_ref, o_ref):
  del i
  @pl.when(j == 0)
  def _():
    o_ref[...] = x_ref[...]
  @pl.when(j > 0)
  def _():
    o_ref[...] = jnp.maximum(o_ref[...], x_ref[...])


REVISIT_CASES = {
    'accumulate': ((4, 3), _accumulate),
    'write_first_visit': ((2, 4), _write_first_visit),
    'last_write_wins': ((3, 3), _last_write_wins),
    'running_max': ((2, 5), _running_max),
}

# emit_pipeline cases: name: (the inner grid, the block shape, the shape of
# the HBM arrays, the index map, the inner body on (x block, output block)).
PIPELINE_CASES = {
    'add_one': ((4,), (8, 128), (32, 128), lambda i: (i, 0),
                lambda x_ref, o_ref: o_ref.__setitem__(
                    Ellipsis, x_ref[...] + 1)),
    'scale_2d_grid': ((2, 3), (8, 128), (16, 384),
                            lambda i, j: (i, j),
                            lambda x_ref, o_ref: o_ref.__setitem__(
                                Ellipsis, x_ref[...] * 3 - 1)),
}


# emit_pipeline bodies that read the grid: name: (the kernel's grid, the
# pipeline's grid, whether the pipeline's grid is read from SMEM at run time).
# The body adds `(pl.program_id(a) * 16 + pl.num_programs(a)) * 256**a` for
# every axis `a` of the pipeline's grid (with the primitive, jax rejects the
# kernel's axes in the body when it traces it: `Axis 1 is out of bounds for
# grid (3,)`). A static grid's `pl.num_programs` is a number when the body is
# traced; a run-time one's is computed when the kernel runs.
PIPELINE_GRID_CASES = {
    'no_kernel_grid_1d': ((), (4,), False),
    'no_kernel_grid_2d': ((), (2, 3), False),
    'kernel_grid_1d': ((2,), (3,), False),
    'run_time_grid_1d': ((), (4,), True),
    'run_time_grid_2d': ((), (2, 3), True),
    'run_time_grid_in_kernel_grid': ((2,), (3,), True),
}


def _vmem_oom(x_ref, o_ref, big_ref):
  big_ref[0] = x_ref[...]
  o_ref[...] = big_ref[0] + 1


def _no_decrement(x_ref, o_ref, sem):
  # The count after the wait scales the output: 2 if the wait left it.
  pl.semaphore_signal(sem, 2)
  pl.semaphore_wait(sem, 1, decrement=False)
  count = pl.semaphore_read(sem)
  o_ref[...] = x_ref[...] * count.astype(jnp.float32)
  pl.semaphore_wait(sem, count)


def _dynamic_lane_slice(x_ref, o_ref):
  i = pl.program_id(0) * 3 + 5
  o_ref[...] = x_ref[:, pl.ds(i, 128)]


def _int16_scalar(x_ref, o_ref):
  o_ref[0] = x_ref[0] * x_ref[1] + x_ref[2]


def _uint8_matmul(x_ref, o_ref):
  o_ref[...] = jnp.dot(x_ref[...], x_ref[...],
                       preferred_element_type=jnp.uint32)


# Kernels that Mosaic may reject. name: (the kernel, its input's shape and
# dtype, its output's shape and dtype, the input's and output's memory
# space, scratch shapes as a function, the grid).
REJECT_CASES = {
    # 256 MiB of VMEM: more than any TPU has.
    'vmem_oom': (_vmem_oom, ((8, 128), 'float32'), ((8, 128), 'float32'),
                 'vmem', lambda: [pltpu.VMEM((2**16, 8, 128), jnp.float32)],
                 ()),
    'non_decrementing_wait': (
        _no_decrement, ((8, 128), 'float32'), ((8, 128), 'float32'), 'vmem',
        lambda: [pltpu.SemaphoreType.REGULAR], ()),
    'dynamic_lane_slice': (
        _dynamic_lane_slice, ((8, 256), 'float32'), ((8, 128), 'float32'),
        'vmem', list, (1,)),
    'int16_scalar_arithmetic': (
        _int16_scalar, ((3,), 'int16'), ((1,), 'int16'), 'smem', list, ()),
    'uint8_matmul': (
        _uint8_matmul, ((128, 128), 'uint8'), ((128, 128), 'uint32'), 'vmem',
        list, ()),
}

# (dtype of both operands, precision) of each matmul case.
MATMUL_CASES = (
    ('int8', None),
    ('bfloat16', None),
    ('float32', None),
    ('float32', 'high'),
    ('float32', 'highest'),
)


# The seeds of the prng cases.
PRNG_SEEDS = (0, 1, 7, 123456789)


def _bits(x):
  x = np.asarray(x)
  unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize]
  return x.view(unsigned)


def _memory_space(name):
  return {'vmem': pltpu.VMEM, 'smem': pltpu.SMEM, 'hbm': pl.ANY}[name]


def dma_semaphore(src, dst, shape, dtype, interpret=None):
  """`[max while polling, after polling, after wait()]` of a DMA semaphore
  after one copy of `shape` and `dtype` from `src` to `dst` (an input in
  `src`; a scratch buffer in `dst`, an output for HBM)."""
  x = jnp.arange(np.prod(shape), dtype=jnp.int32).astype(dtype).reshape(shape)

  def body(x_ref, o_ref, dst_ref, sem):
    copy = pltpu.make_async_copy(x_ref, dst_ref, sem)
    copy.start()

    def poll(_, m):
      return jnp.maximum(m, pl.semaphore_read(sem))

    o_ref[0] = lax.fori_loop(0, _POLLS, poll, jnp.int32(0))
    o_ref[1] = pl.semaphore_read(sem)
    copy.wait()
    o_ref[2] = pl.semaphore_read(sem)

  out_shape = [jax.ShapeDtypeStruct((3,), jnp.int32)]
  out_specs = [pl.BlockSpec(memory_space=pltpu.SMEM)]
  if dst == 'hbm':
    out_shape.append(jax.ShapeDtypeStruct(shape, dtype))
    out_specs.append(pl.BlockSpec(memory_space=pl.ANY))
    scratch_shapes = [pltpu.SemaphoreType.DMA]
  else:
    scratch_shapes = [_memory_space(dst)(shape, dtype),
                      pltpu.SemaphoreType.DMA]
  out = pl.pallas_call(
      body,
      out_shape=out_shape,
      in_specs=[pl.BlockSpec(memory_space=_memory_space(src))],
      out_specs=out_specs,
      scratch_shapes=scratch_shapes,
      interpret=interpret,
  )(x)
  return [int(v) for v in np.asarray(out[0])]


def stochastic_round(shift, f, interpret=None):
  """The indices of the 1024 elements that round away from zero."""
  x = jnp.full((8, 128), np.sign(f) * (1 + abs(f) * 2**-7), jnp.float32)
  bits = jnp.arange(1024, dtype=jnp.uint32).reshape(8, 128) << shift

  def kernel(x_ref, bits_ref, o_ref):
    o_ref[...] = pltpu.stochastic_round(
        x_ref[...], bits_ref[...], target_dtype=jnp.bfloat16)

  out = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((8, 128), jnp.bfloat16),
      interpret=interpret,
  )(x, bits)
  away = np.abs(np.asarray(out, np.float32)) > 1
  return [int(i) for i in np.flatnonzero(away.reshape(-1))]


def elementwise(name, interpret=None):
  """The bit patterns of `ELEMENTWISE_CASES[name]`'s results, a list of
  unsigned integers (only the elements its inputs fill)."""
  fn, make_inputs = ELEMENTWISE_CASES[name]
  inputs, n = make_inputs()
  out_dtype = jax.eval_shape(
      fn, *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]).dtype

  def kernel(*refs):
    *in_refs, o_ref = refs
    o_ref[...] = fn(*[r[...] for r in in_refs])

  out = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((8, 128), out_dtype),
      interpret=interpret,
  )(*inputs)
  return [int(v) for v in _bits(out).reshape(-1)[:n]]


def scalar_inputs(name):
  """The inputs of `SCALAR_CASES[name]`: one or two 1-D arrays."""
  fn, dtype, edges = SCALAR_CASES[name]
  edges = np.array(edges, dtype)
  n = len(edges)
  if name.startswith('float32_to_'):
    return [edges]
  return [np.repeat(edges, n), np.tile(edges, n)]


def scalar(name, interpret=None):
  """The bit patterns of `SCALAR_CASES[name]` computed element by element
  on scalars read from SMEM, a list of unsigned integers."""
  fn = SCALAR_CASES[name][0]
  inputs = scalar_inputs(name)
  n = inputs[0].shape[0]
  out_dtype = jax.eval_shape(
      fn, *[jax.ShapeDtypeStruct((), x.dtype) for x in inputs]).dtype

  def kernel(*refs):
    *in_refs, o_ref = refs

    def body(i, carry):
      o_ref[i] = fn(*[r[i] for r in in_refs])
      return carry

    lax.fori_loop(0, n, body, 0)

  result = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((n,), out_dtype),
      in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)] * len(inputs),
      out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
      interpret=interpret,
  )(*inputs)
  return [int(v) for v in _bits(result).reshape(-1)]


def prng(seed, interpret=None):
  """Three draws of (8, 128) random bits, the third after seeding again:
  three lists of 1024 unsigned integers."""

  def kernel(o_ref):
    pltpu.prng_seed(seed)
    o_ref[0] = pltpu.bitcast(pltpu.prng_random_bits((8, 128)), jnp.int32)
    o_ref[1] = pltpu.bitcast(pltpu.prng_random_bits((8, 128)), jnp.int32)
    pltpu.prng_seed(seed)
    o_ref[2] = pltpu.bitcast(pltpu.prng_random_bits((8, 128)), jnp.int32)

  out = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((3, 8, 128), jnp.int32),
      interpret=interpret,
  )()
  return [[int(v) for v in _bits(draw).reshape(-1)] for draw in out]


def matmul_inputs(dtype):
  """The operands of a matmul case: (8, 128) and (128, 128) of `dtype`,
  small integers (exact in every dtype) scaled for the float dtypes so that
  products need more than bfloat16's 8 bits."""
  i = np.arange(8 * 128).reshape(8, 128)
  j = np.arange(128 * 128).reshape(128, 128)
  a = (i * 7 + 3) % 23 - 11
  b = (j * 5 + 1) % 19 - 9
  if dtype == 'int8':
    return a.astype(np.int8), b.astype(np.int8)
  a = a * (1 + ((i % 13) / 8192))
  b = b * (1 + ((j % 11) / 4096))
  return (np.asarray(a, np.float32).astype(dtype),
          np.asarray(b, np.float32).astype(dtype))


def matmul(dtype, precision, interpret=None):
  """The bit patterns of `jnp.dot` of a matmul case's operands, 1024
  unsigned integers (int32 results for int8, float32 for the others)."""
  a, b = matmul_inputs(dtype)
  out_dtype = jnp.int32 if dtype == 'int8' else jnp.float32

  def kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], precision=precision,
                         preferred_element_type=out_dtype)

  out = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((8, 128), out_dtype),
      interpret=interpret,
  )(a, b)
  return [int(v) for v in _bits(out).reshape(-1)]


def semaphore(name, interpret=None):
  """The values of a REGULAR semaphore array of two after each operation of
  `SEMAPHORE_CASES[name]`: a list of `[first, second]`."""
  ops = SEMAPHORE_CASES[name]

  def kernel(o_ref, sems):
    for k, (op, index, value) in enumerate(ops):
      if op == 'signal':
        pl.semaphore_signal(sems.at[index], value)
      else:
        pl.semaphore_wait(sems.at[index], value)
      o_ref[2 * k] = pl.semaphore_read(sems.at[0])
      o_ref[2 * k + 1] = pl.semaphore_read(sems.at[1])

  out = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((2 * len(ops),), jnp.int32),
      out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
      scratch_shapes=[pltpu.SemaphoreType.REGULAR((2,))],
      interpret=interpret,
  )()
  return np.asarray(out).reshape(-1, 2).tolist()


def _whole_result(fn, inputs, interpret):
  """`fn` of `inputs` in a kernel on whole VMEM blocks: its result's bits, a
  list of unsigned integers in row-major order."""
  out = jax.eval_shape(
      fn, *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs])

  def kernel(*refs):
    *in_refs, o_ref = refs
    o_ref[...] = fn(*[r[...] for r in in_refs])

  result = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype),
      interpret=interpret,
  )(*inputs)
  return [int(v) for v in _bits(result).reshape(-1)]


def layout(name, interpret=None):
  """The bit patterns of `LAYOUT_CASES[name]`'s whole result, a list of
  unsigned integers in row-major order."""
  fn, make_inputs = LAYOUT_CASES[name]
  return _whole_result(fn, make_inputs(), interpret)


def pack_inputs(name):
  """The inputs of `PACK_CASES[name]` for the installed jax."""
  inputs = PACK_CASES[name][1]()
  if name.startswith('unpack_') and jax.__version_info__ < (0, 10, 2):
    # Before jax 0.10.2 unpack_elementwise takes only uint32 (the same bits).
    inputs = [x.view(np.uint32) for x in inputs]
  return inputs


def pack(name, interpret=None):
  """The bit patterns of `PACK_CASES[name]`'s whole result, a list of
  unsigned integers in row-major order."""
  return _whole_result(PACK_CASES[name][0], pack_inputs(name), interpret)


def masked_inputs(name):
  """A masked case's buffer contents before the load or store, and the
  values a store writes (a load's kernel ignores them)."""
  _, shape, dtype, _ = MASKED_CASES[name]
  n = int(np.prod(shape))
  before = (np.arange(n) % 251 - 125).astype(dtype).reshape(shape)
  values = (np.arange(n) * 7 % 509 + 1000).astype(dtype).reshape(shape)
  return before, values


def masked(name, interpret=None):
  """The bits of a buffer after a masked store of `MASKED_CASES[name]`, or
  of the value a masked load of it gives, unsigned integers in row-major
  order (the elements the mask leaves out included)."""
  op, shape, dtype, make_mask = MASKED_CASES[name]
  before, values = masked_inputs(name)

  def kernel(before_ref, values_ref, o_ref):
    mask = make_mask(shape)
    if op == 'store':
      o_ref[...] = before_ref[...]
      pltpu.store(o_ref, values_ref[...], mask=mask)
    else:
      o_ref[...] = pltpu.load(before_ref, mask=mask)

  out = pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct(shape, dtype),
      interpret=interpret,
  )(before, values)
  return [int(v) for v in _bits(out).reshape(-1)]


def revisit_input(name):
  """The float32 input of `REVISIT_CASES[name]`: (8 * grid[0],
  128 * grid[1])."""
  grid, _ = REVISIT_CASES[name]
  n = 8 * grid[0] * 128 * grid[1]
  return ((np.arange(n) * 37 % 1001) - 500).astype(np.float32).reshape(
      8 * grid[0], 128 * grid[1])


def revisit(name, interpret=None):
  """The output of `REVISIT_CASES[name]`: (8 * grid[0], 128) float32 bits,
  unsigned integers in row-major order."""
  grid, body = REVISIT_CASES[name]

  def kernel(x_ref, o_ref):
    body(pl.program_id(0), pl.program_id(1), x_ref, o_ref)

  out = pl.pallas_call(
      kernel,
      grid=grid,
      in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
      out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
      out_shape=jax.ShapeDtypeStruct((8 * grid[0], 128), jnp.float32),
      interpret=interpret,
  )(revisit_input(name))
  return [int(v) for v in _bits(out).reshape(-1)]


def pipeline_input(name):
  """The float32 input of `PIPELINE_CASES[name]`, of its HBM arrays' shape."""
  shape = PIPELINE_CASES[name][2]
  return ((np.arange(np.prod(shape)) * 13 % 997) - 400).astype(
      np.float32).reshape(shape)


def pipeline(name, interpret=None):
  """The output of `pltpu.emit_pipeline` over `PIPELINE_CASES[name]`, in a
  pallas_call whose operands stay in HBM: float32 bits, unsigned integers in
  row-major order."""
  grid, block, shape, index_map, body = PIPELINE_CASES[name]

  def kernel(x_hbm, o_hbm):
    pltpu.emit_pipeline(
        body, grid=grid,
        in_specs=[pl.BlockSpec(block, index_map)],
        out_specs=[pl.BlockSpec(block, index_map)],
    )(x_hbm, o_hbm)

  out = pl.pallas_call(
      kernel,
      in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
      out_specs=pl.BlockSpec(memory_space=pl.ANY),
      out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
      interpret=interpret,
  )(pipeline_input(name))
  return [int(v) for v in _bits(out).reshape(-1)]


def pipeline_grid(name, primitive, interpret=None):
  """The output of an `emit_pipeline` of `PIPELINE_GRID_CASES[name]`.

  With `jax_use_emit_pipeline_primitive` set to `primitive`, in a pallas_call
  whose operands stay in HBM: float32 bits, row-major. Blocks are (8, 128);
  every step of the kernel's grid runs the whole pipeline (the last one's
  output stays).
  """
  kernel_grid, grid, run_time = PIPELINE_GRID_CASES[name]
  shape = (8 * grid[0], 128 * (grid[1] if len(grid) > 1 else 1))

  def body(x_ref, o_ref):
    added = sum((pl.program_id(a) * 16 + pl.num_programs(a)) * 256**a
                for a in range(len(grid)))
    o_ref[...] = x_ref[...] + jnp.asarray(added, jnp.int32).astype(
        jnp.float32)

  def index_map(*ids):
    return (ids[0], ids[1] if len(ids) > 1 else 0)

  def kernel(n_ref, x_hbm, o_hbm):
    pltpu.emit_pipeline(
        body,
        grid=tuple(n_ref[a] for a in range(len(grid))) if run_time else grid,
        in_specs=[pl.BlockSpec((8, 128), index_map)],
        out_specs=[pl.BlockSpec((8, 128), index_map)],
    )(x_hbm, o_hbm)

  x = np.zeros(shape, np.float32)
  with _emit_pipeline_primitive(primitive):
    out = pl.pallas_call(
        kernel,
        grid=kernel_grid,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                  pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
        interpret=interpret,
    )(np.array(grid, np.int32), x)
  return [int(v) for v in _bits(out).reshape(-1)]


@contextlib.contextmanager
def _emit_pipeline_primitive(value):
  """Sets `jax_use_emit_pipeline_primitive` (jax 0.10.2 and newer)."""
  before = jax.config.jax_use_emit_pipeline_primitive
  jax.config.update('jax_use_emit_pipeline_primitive', value)
  try:
    yield
  finally:
    jax.config.update('jax_use_emit_pipeline_primitive', before)


def reject(name, interpret=None):
  """Runs `REJECT_CASES[name]` on ones: `{'output': its first element}`
  where it ran, else `{'raised': the exception's class name, 'message': the
  first line of its message}`."""
  kernel, (in_shape, in_dtype), (out_shape, out_dtype), space, scratch, grid = (
      REJECT_CASES[name])
  x = np.ones(in_shape, in_dtype)
  spec = pl.BlockSpec(memory_space=_memory_space(space))
  try:
    out = jax.block_until_ready(pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=[spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(out_shape, out_dtype),
        scratch_shapes=scratch(),
        interpret=interpret,
    )(x))
  except Exception as e:  # pylint: disable=broad-except
    lines = str(e).strip().splitlines() or ['']
    return {'raised': type(e).__name__, 'message': lines[0][:300]}
  return {'output': np.asarray(out).reshape(-1)[0].item()}


def dumps(data) -> str:
  """A recording as JSON text with one line per case (so diffs stay small)."""
  lines = []
  for key, value in data.items():
    if isinstance(value, list):
      entries = [json.dumps(e, separators=(',', ':')) for e in value]
      lines.append(f' {json.dumps(key)}: [\n  ' + ',\n  '.join(entries)
                   + '\n ]')
    else:
      lines.append(f' {json.dumps(key)}: {json.dumps(value)}')
  return '{\n' + ',\n'.join(lines) + '\n}\n'


def _write(output, data):
  """Writes `dumps(data)` to `output` whole or not at all."""
  tmp = output + '.tmp'
  with open(tmp, 'w') as f:
    f.write(dumps(data))
  os.replace(tmp, output)


def _run(fn, *args, interpret):
  try:
    return {'result': fn(*args, interpret=interpret)}
  except Exception as e:  # pylint: disable=broad-except
    return {'error': f'{type(e).__name__}: {str(e)[:2000]}',
            'traceback': traceback.format_exc()[-4000:]}


def _by_name(cases):
  return [({'name': name}, (name,)) for name in cases]


# kind: (its recorder, its cases: the fields of the case's entry and the
# recorder's arguments).
KINDS = {
    'dma_semaphore': (dma_semaphore, [
        ({'src': src, 'dst': dst, 'shape': list(shape), 'dtype': dtype},
         (src, dst, shape, dtype))
        for src, dst, shape, dtype in DMA_CASES]),
    'stochastic_round': (stochastic_round, [
        ({'shift': shift, 'f': f}, (shift, f))
        for shift, f in STOCHASTIC_ROUND_CASES]),
    'elementwise': (elementwise, _by_name(ELEMENTWISE_CASES)),
    'matmul': (matmul, [
        ({'dtype': dtype, 'precision': precision}, (dtype, precision))
        for dtype, precision in MATMUL_CASES]),
    'layout': (layout, _by_name(LAYOUT_CASES)),
    'scalar': (scalar, _by_name(SCALAR_CASES)),
    'prng': (prng, [({'seed': seed}, (seed,)) for seed in PRNG_SEEDS]),
    'semaphore': (semaphore, _by_name(SEMAPHORE_CASES)),
    'pack': (pack, _by_name(PACK_CASES)),
    'masked': (masked, _by_name(MASKED_CASES)),
    'revisit': (revisit, _by_name(REVISIT_CASES)),
    'pipeline': (pipeline, _by_name(PIPELINE_CASES)),
    'pipeline_grid': (pipeline_grid, [
        ({'name': name, 'primitive': primitive}, (name, primitive))
        for name in PIPELINE_GRID_CASES for primitive in (False, True)]),
    'reject': (reject, _by_name(REJECT_CASES)),
}


def _record_isolated(output, kinds, interpret) -> int:
  """Records each case of `kinds` with `--case` in a child process.

  The recording's header (versions, device kind, date) is the first child's
  that wrote one. A child that writes no entry (it crashed) leaves
  `{'error': 'the process died (exit code N): <the failed check, or its
  last line>'}`.
  """
  data = None
  entries = {kind: [] for kind in kinds}
  for kind in kinds:
    for index, (fields, _) in enumerate(KINDS[kind][1]):
      tmp = f'{output}.case'
      if os.path.exists(tmp):
        os.remove(tmp)
      cmd = [sys.executable, os.path.abspath(__file__), '-o', tmp, '--kinds',
             kind, '--case', str(index)] + (['--interpret'] if interpret
                                            else [])
      proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
      child = None
      if os.path.exists(tmp):
        with open(tmp) as f:
          child = json.load(f)
        os.remove(tmp)
      if child is not None and child[kind]:
        entry = child[kind][0]
        if data is None:
          data = {k: v for k, v in child.items() if k not in KINDS}
      else:
        lines = [line for line in (proc.stderr + proc.stdout).splitlines()
                 if line.strip()]
        # A failed check of the compiler says why (`F... Check failed: ...`);
        # the last line is the abort.
        why = [line for line in lines if 'Check failed' in line] or lines[-1:]
        entry = dict(fields)
        entry['error'] = (f'the process died (exit code {proc.returncode}): '
                          + (why[0][:1000] if why else ''))
      entries[kind].append(entry)
      print(kind, index, entry['error'][:200] if 'error' in entry else 'ok',
            flush=True)
  if data is None:
    print('no case ran', file=sys.stderr)
    return 1
  data.update(entries)
  _write(output, data)
  return 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('-o', '--output', required=True)
  parser.add_argument('--interpret', action='store_true',
                      help='run in TPU interpret mode on CPU')
  parser.add_argument('--kinds', default=','.join(KINDS),
                      help='comma-separated kinds to record (default: all)')
  parser.add_argument('--case', type=int, default=None,
                      help='record only this case (its index) of the one kind')
  parser.add_argument('--isolate', action='store_true',
                      help='record each case in a process of its own, so that '
                      'a case that kills its process (a compiler crash) is '
                      'recorded as an error and the others still run; each '
                      'process opens the chip (about 10 s)')
  args = parser.parse_args(argv)
  kinds = args.kinds.split(',')
  unknown = set(kinds) - set(KINDS)
  if unknown:
    parser.error(f'unknown kinds: {sorted(unknown)}; known: {list(KINDS)}')
  if args.case is not None and (
      len(kinds) != 1 or args.isolate
      or args.case not in range(len(KINDS[kinds[0]][1]))):
    parser.error('--case needs exactly one kind, of which it is the index of '
                 'a case, and no --isolate')
  if args.isolate:
    return _record_isolated(args.output, kinds, args.interpret)
  interpret = None
  stack = contextlib.ExitStack()
  if args.interpret:
    # As close to the TPU as interpret mode gets: float32 matmuls as the
    # TPU multiplies them, where the series has the option (jax 0.10.0 on).
    # The TPU v5e simulated (emit_pipeline asks for the TPU's tiling), where
    # the series can (jax 0.10.1 on).
    fields = {f.name for f in dataclasses.fields(pltpu.InterpretParams)}
    interpret = pltpu.InterpretParams(**{
        k: v for k, v in (('matmul_precision', 'tpu'),
                          ('device_kind', 'TPU v5 lite')) if k in fields})
    stack.enter_context(pltpu.force_tpu_interpret_mode(interpret))
  device = jax.devices()[0]
  data = {
      'jax': jax.__version__,
      'jaxlib': jax.lib.__version__,
      'device_kind': device.device_kind,
      'platform': device.platform,
      'interpret': args.interpret,
      'date': datetime.date.today().isoformat(),
      **{kind: [] for kind in kinds},
  }
  with stack:
    for kind in kinds:
      recorder, cases = KINDS[kind]
      if args.case is not None:
        cases = cases[args.case:args.case + 1]
      for fields, recorder_args in cases:
        entry = dict(fields)
        entry.update(_run(recorder, *recorder_args, interpret=interpret))
        data[kind].append(entry)
        print(kind, *recorder_args, entry['error'] if 'error' in entry
              else 'ok', flush=True)
        _write(args.output, data)
  return 0


if __name__ == '__main__':
  sys.exit(main())
