"""Checks TPU interpret mode against what a TPU computed.

Each file of `hardware/recordings/` holds what `hardware/record.py` recorded
on a TPU (the device kind, jax version and date are in the file). This test
runs the same kernels in TPU interpret mode on CPU and compares the results:
exactly for a DMA semaphore's counts (patch 0047 of the newest series, jax
0.11.0 and newer), the elements `pltpu.stochastic_round` rounds away from
zero (patch 0039, jax 0.10.0 and newer), integer and float arithmetic,
conversions and reductions on edge values (in vectors and, on the scalar
unit, in SMEM scalars), bitcasts, rolls, bit counts and rounding, int8 and
bfloat16 matmuls, float32 ones at the default precision with
`matmul_precision="tpu"` (patch 0048 of the newest series, jax 0.10.0 and
newer), REGULAR semaphore counts, `pltpu.pack_elementwise` and
`unpack_elementwise` (jax 0.10.0 and newer), masked stores, outputs
revisited over grid steps and `emit_pipeline` (with a simulated TPU, jax
0.10.1 and newer; the recordings of these two are also checked against
numpy), `pl.program_id` and `pl.num_programs` in `emit_pipeline` bodies,
with and without the primitive (#25, jax 0.11.0 and newer; interpret mode
also against numpy, and where the TPU's jax 0.10.2 lowered the primitive as
jax 0.11 no longer does, the recording against that lowering); the errors
of kernels the TPU's jax rejected (interpret mode raises the same class,
or, for `ACCEPTED_BY_INTERPRET_MODE`, runs them; for
`REJECTED_SINCE`, the same message from a release on), and the
kernels around the VMEM limits of `hardware/probes/vmem_probe.py` (accepted
or rejected as on the TPU, with the same windows named, also with the scoped
VMEM limit set by libtpu's flag: #52, jax 0.11.0 and newer) and the
internal scratch sizes of `hardware/probes/internal_scratch_probe.py` (the
same errors and messages, #52), the integer operations of each width of
`hardware/probes/integer_width_probe.py` (Mosaic's rejections, #40) and the
int32 arrays in SEMAPHORE memory of `hardware/probes/semaphore_memory_probe.py`
(refused where the TPU did not run them, jax 0.10.1 and newer), and the
float32 sums of `hardware/probes/mxu_accumulation_probe.py` (the MXU's order,
`matmul_precision="tpu"`, jax 0.10.0 and newer); by their
statistics for the bits of `pltpu.prng_random_bits` (jax 0.11.0 and newer);
to the tolerances of `ULP_TOLERANCE` for transcendentals and float32
matmuls at the highest precision. `KNOWN_DIFFERENCES` are where interpret
mode does not compute what the TPU computes: those elements are not
compared with interpret mode; instead the test checks that the recording
shows what the difference's description says the TPU does. On a jax release
whose series lacks a kind's patch, that kind is skipped, with the reason.
"""

import json
import os
import pathlib
import re
import sys
from unittest import mock

from absl.testing import absltest
import jax
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import ml_dtypes
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'hardware'))
# pylint: disable=g-import-not-at-top,wrong-import-position
import record
from probes import integer_width_probe
from probes import internal_scratch_probe
from probes import mxu_accumulation_probe
from probes import semaphore_memory_probe
from probes import vmem_probe
# pylint: enable=g-import-not-at-top,wrong-import-position

RECORDINGS = sorted((ROOT / 'hardware' / 'recordings').glob('*.json'))

# The first jax release whose series has the patch each kind needs.
_SINCE = {'dma_semaphore': (0, 11, 0), 'stochastic_round': (0, 10, 0),
          'elementwise': (0, 0, 0), 'matmul': (0, 0, 0),
          'layout': (0, 0, 0), 'scalar': (0, 0, 0),
          # The series for jax 0.10 raises NotImplementedError for
          # prng_random_bits (#9 is not in it; stock gives zeros).
          'prng': (0, 11, 0),
          'matmul_precision': (0, 10, 0),
          'semaphore': (0, 0, 0), 'masked': (0, 0, 0), 'revisit': (0, 0, 0),
          'reject': (0, 10, 0),  # Mosaic's uint8 matmul error: #40.
          'vmem': (0, 11, 0),  # Mosaic's VMEM out-of-memory error: #52.
          'pack': (0, 10, 0),  # pltpu.pack_elementwise: #34.
          # emit_pipeline asks for the TPU's tiling: a simulated TPU, #36.
          'pipeline': (0, 10, 1),
          # The emit_pipeline primitive's rule: #25 (#60 on 0.11.0 and
          # 0.11.1); without the primitive, as 'pipeline'.
          'pipeline_grid': (0, 11, 0),
          # Mosaic's errors for integer arithmetic of other widths: #40;
          # those of a TPU v5e need a simulated TPU, #36.
          'integer_width': (0, 10, 1),
          # int32 arrays in SEMAPHORE memory refused: #12, semaphore-typed
          # pallas_call operands (on jax 0.10.0, without it, the pallas_call
          # fails with a TypeError in the interpreter's callback, and
          # pl.kernel takes no out_type).
          'semaphore_memory': (0, 10, 1)}

# Matmuls the TPU's jax did not compile: the error it recorded.
NOT_COMPILED = {
    # jax 0.10.2's Mosaic lowering has no contract precision for HIGH
    # (jax 0.11 and newer lower it to three bfloat16 passes).
    ('float32', 'high'): 'Unsupported dot precision: HIGH',
}

# The largest difference allowed between the TPU and interpret mode, in
# units in the last place of float32, where the TPU rounds differently from
# XLA on CPU (its exp, log and tanh are less accurate). Measured on the TPU
# v5e recording against jax 0.12.0.1 on CPU (2026-12-05), the largest
# differences were: exp 91, log 130, tanh 605 (a relative error of 5.8e-5),
# sqrt, rsqrt and sin 2, division 1 (besides _division_by_a_huge_divisor),
# and the float32 matmul at the highest precision 213
# (in a result near zero: 3.1e-4 where the results reach 790).
ULP_TOLERANCE = {
    'exp_float32': 128,
    'log_float32': 192,
    'tanh_float32': 768,
    'sqrt_float32': 4,
    'rsqrt_float32': 4,
    'sin_float32': 4,
    'div_float32': 1,
    ('float32', 'highest'): 320,
}


def _floats(bits, dtype):
  unsigned = {2: np.uint16, 4: np.uint32}[dtype.itemsize]
  return np.asarray(bits, np.uint64).astype(unsigned).view(dtype)


def _division_by_a_huge_divisor(name, inputs, n, tpu, dtype):
  # float32 x / y is x * (1 / y) on the TPU (within 1 ulp of the rounded
  # quotient, ULP_TOLERANCE), and 1 / y of |y| >= 2**126 is a subnormal,
  # which the TPU flushes to zero: x / y is x * (a zero of y's sign), a
  # signed zero, NaN for an infinite x. Interpret mode divides.
  if name != 'div_float32':
    return None
  x, y = (np.asarray(v).reshape(-1)[:n] for v in inputs)
  known = np.abs(y) >= 2.0**126
  with np.errstate(invalid='ignore'):
    zero = x[known] * np.copysign(np.float32(0), y[known])
  got = _floats(tpu[known], dtype)
  ok = np.all((got == zero) & (np.signbit(got) == np.signbit(zero))
              | np.isnan(got) & np.isnan(zero))
  return known, ok


def _subnormal_flushed(name, inputs, n, tpu, dtype):
  # float32 to bfloat16 (`astype`) of a float32 subnormal gives a zero of
  # its sign on the TPU; interpret mode gives the nearest bfloat16
  # subnormal. (`pltpu.pack_elementwise` and `unpack_elementwise` flush as
  # the TPU does: patch 0034.)
  if name != 'float32_to_bfloat16':
    return None
  x = np.asarray(inputs[0]).reshape(-1)[:n].astype(np.float32)
  known = (x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny)
  sign = {2: 0x8000, 4: 0x80000000}[dtype.itemsize]
  ok = np.all(tpu[known] == np.where(np.signbit(x[known]), sign, 0))
  return known, ok


def _nan_sign(name, inputs, n, tpu, dtype):
  # A NaN that an operation makes (0 * inf, inf - inf, 0 / 0, min with a
  # NaN) is 0x7FC00000 (bfloat16 0x7FC0) on the TPU, its sign bit clear;
  # XLA on x86 CPUs makes it with the sign bit set. Both are NaN: interpret
  # mode must give a NaN there, of either sign.
  del name, inputs, n
  if not jnp.issubdtype(dtype, jnp.floating):
    return None
  known = np.isnan(_floats(tpu, dtype))
  ok = np.all(tpu[known] == {2: 0x7FC0, 4: 0x7FC00000}[dtype.itemsize])
  return known, ok


# Where interpret mode does not compute what the TPU computes (measured on
# the TPU v5e recording): each rule, given a case's name, its inputs, how
# many elements they fill, the TPU's result bits and the result's dtype,
# gives the elements it explains (None where it does not apply) and whether
# the recording shows what it says the TPU does there. Those elements are
# not compared bit for bit; the rules before `_nan_sign` take precedence.
KNOWN_DIFFERENCES = (
    _division_by_a_huge_divisor,
    _subnormal_flushed,
    _nan_sign,
)


# Kernels that the TPU's jax rejected and interpret mode runs (no check
# there yet): (kind, name): the error class and part of the message the
# recording has.
ACCEPTED_BY_INTERPRET_MODE = {
    ('reject', 'vmem_oom'): ('JaxRuntimeError', 'RESOURCE_EXHAUSTED'),
    ('reject', 'dynamic_lane_slice'): (
        'MosaicError', 'cannot statically prove that index in dimension 1 '
        'is a multiple of 128'),
}

# Kernels that the TPU's jax rejected and interpret mode rejects from a jax
# release on, with the same class and message (before it, it runs them):
# (kind, name): the release and the message.
REJECTED_SINCE = {
    # Mosaic's lowering rejects a masked store of non-32-bit data: #40.
    ('masked', 'store_bfloat16_rows'): (
        (0, 10, 0), 'masked swap with non-32-bit data'),
}


def _bits_of_halves(bits, count):
  """uint32 words as their `count` parts, lowest bits first."""
  width = 32 // count
  parts = [(bits >> np.uint64(width * k)) & np.uint64(2**width - 1)
           for k in range(count)]
  return np.stack(parts, axis=-1).reshape(-1)


def _expected_revisit(name, x):
  """What `record.REVISIT_CASES[name]` computes: numpy, per output block."""
  rows, cols = x.shape[0] // 8, x.shape[1] // 128
  blocks = x.reshape(rows, 8, cols, 128).transpose(0, 2, 1, 3)
  out = {'accumulate': blocks.sum(1, dtype=np.float32),
         'write_first_visit': blocks[:, 0],
         'last_write_wins': blocks[:, -1] * 2,
         'running_max': blocks.max(1)}[name]
  return out.reshape(rows * 8, 128)


_EXPECTED_PIPELINE = {'add_one': lambda x: x + 1,
                      'scale_2d_grid': lambda x: x * 3 - 1}


class HardwareParityTest(absltest.TestCase):

  def _recordings(self, kind):
    """The recordings that have `kind`: (data, a name for messages)."""
    for path in RECORDINGS:
      data = json.loads(path.read_text())
      if kind in data:
        yield data, f'{path.name} ({data["device_kind"]}, jax {data["jax"]})'

  def test_there_are_recordings_of_a_tpu(self):
    self.assertNotEmpty(RECORDINGS)
    kinds = set()
    for path in RECORDINGS:
      data = json.loads(path.read_text())
      self.assertEqual(data['platform'], 'tpu', path)
      self.assertFalse(data['interpret'], path)
      for kind in record.KINDS:
        if kind in data:
          self.assertNotEmpty(data[kind], f'{path}: {kind}')
          kinds.add(kind)
    # Each kind is recorded (a recording may hold some: record.py --kinds).
    self.assertEqual(kinds, set(record.KINDS))

  def _check(self, kind, run):
    self._skip_before(kind)
    params = pltpu.InterpretParams()
    checked = 0
    for data, where in self._recordings(kind):
      for entry in data[kind]:
        if 'result' not in entry:
          continue  # The TPU did not run it (the entry says why).
        case = {k: v for k, v in entry.items() if k != 'result'}
        with self.subTest(recording=where, **case):
          self.assertEqual(run(case, params), entry['result'],
                           f'{kind} {case}: interpret mode differs from '
                           f'{where}')
        checked += 1
    self.assertGreater(checked, 0)

  def test_dma_semaphore_counts_as_on_the_tpu(self):
    def run(case, params):
      return record.dma_semaphore(case['src'], case['dst'],
                                  tuple(case['shape']), case['dtype'],
                                  interpret=params)
    self._check('dma_semaphore', run)

  def test_stochastic_round_rounds_as_on_the_tpu(self):
    def run(case, params):
      return record.stochastic_round(case['shift'], case['f'],
                                     interpret=params)
    self._check('stochastic_round', run)

  def _compare(self, name, inputs, n, tpu, got, dtype, where,
               rules=KNOWN_DIFFERENCES):
    """Checks interpret mode's result bits `got` against the TPU's `tpu`.

    Args:
      name: the case's name (`KNOWN_DIFFERENCES` and `ULP_TOLERANCE` use it).
      inputs: the case's input arrays.
      n: how many elements of the results are compared.
      tpu: the TPU's result bits, uint64 of shape (n,).
      got: interpret mode's result bits, uint64 of shape (n,).
      dtype: the results' dtype.
      where: the recording, for messages.
      rules: the `KNOWN_DIFFERENCES` that may apply.
    """
    compare = np.ones(n, bool)
    for rule in rules:
      found = rule(name, inputs, n, tpu, dtype)
      if found is None:
        continue
      known, ok = found
      known &= compare
      self.assertTrue(ok, f'{name}: {where} does not show what '
                      f'{rule.__name__} says the TPU does')
      if rule is _nan_sign:
        self.assertTrue(
            np.all(np.isnan(_floats(got[known], dtype))),
            f'{name}: interpret mode gives no NaN where {where} has '
            f'one, at elements {np.flatnonzero(known)[:10]}')
      compare &= ~known
    if name in ULP_TOLERANCE:
      diff = np.abs(_ordered(tpu) - _ordered(got))[compare]
      self.assertLessEqual(int(diff.max()), ULP_TOLERANCE[name],
                           f'{name}: ulp from {where}')
      return
    mismatch = np.flatnonzero(compare & (tpu != got))
    inputs_there = [np.asarray(x).reshape(-1)[mismatch[:10]]
                    if np.size(x) == n else '...' for x in inputs]
    self.assertEmpty(
        mismatch,
        f'{name}: interpret mode differs from {where} at elements '
        f'{mismatch[:10]} (inputs {inputs_there}; TPU '
        f'{tpu[mismatch[:10]]}, interpret mode {got[mismatch[:10]]})')

  def _skip_before(self, kind):
    if jax.__version_info__ < _SINCE[kind]:
      self.skipTest(f'jax {jax.__version__}: its series has no patch for '
                    f'{kind} (jax {".".join(map(str, _SINCE[kind]))} on)')

  def _check_bits(self, kind, recorder, describe, rules=KNOWN_DIFFERENCES,
                  params=None):
    """Compares the bits interpret mode computes with each recorded case's.

    Args:
      kind: the recording's kind; its entries are named cases.
      recorder: `record`'s function for the kind, run in interpret mode.
      describe: given a case's name, its inputs (for the rules and the
        messages), how many elements of the result are compared, their
        dtype and a function from result bits (uint64) to the compared ones.
      rules: the `KNOWN_DIFFERENCES` that may apply.
      params: the `InterpretParams`, by default the defaults.

    Cases the TPU did not run are checked against the error it recorded:
    interpret mode must raise the same class, or, for
    `ACCEPTED_BY_INTERPRET_MODE`, run.
    """
    self._skip_before(kind)
    params = params or pltpu.InterpretParams()
    checked = 0
    for data, where in self._recordings(kind):
      for entry in data[kind]:
        name = entry['name']
        with self.subTest(recording=where, name=name):
          if 'error' in entry:
            self._check_error(kind, name, entry['error'],
                              lambda n=name: recorder(n, interpret=params))
            continue
          inputs, n, dtype, view = describe(name)
          tpu = view(np.array(entry['result'], np.uint64))
          got = view(np.array(recorder(name, interpret=params), np.uint64))
          self.assertEqual(got.shape, tpu.shape)
          self._compare(name, inputs, n, tpu, got, np.dtype(dtype), where,
                        rules)
          checked += 1
    self.assertGreater(checked, 0)

  def _check_error(self, kind, name, error, run):
    """Checks interpret mode against an error the TPU's jax raised."""
    cls = error.split(':')[0]
    if (kind, name) in ACCEPTED_BY_INTERPRET_MODE:
      want_cls, want_message = ACCEPTED_BY_INTERPRET_MODE[kind, name]
      self.assertEqual(cls, want_cls)
      self.assertIn(want_message, error)
      run()  # Interpret mode runs it: an error-parity gap, documented.
      return
    since, message = REJECTED_SINCE.get((kind, name), ((), ''))
    self.assertIn(message, error)
    if jax.__version_info__ < since:
      run()  # This release's series does not reject it.
      return
    with self.assertRaises(Exception) as raised:
      run()
    self.assertEqual(type(raised.exception).__name__, cls, raised.exception)
    self.assertIn(message, str(raised.exception))

  def _elementwise(self, name):
    fn, make_inputs = record.ELEMENTWISE_CASES[name]
    inputs, n = make_inputs()
    return inputs, n, jax.eval_shape(fn, *inputs).dtype, lambda bits: bits

  def test_elementwise_as_on_the_tpu(self):
    self._check_bits('elementwise', record.elementwise, self._elementwise)

  def test_layout_as_on_the_tpu(self):
    def describe(name):
      fn, make_inputs = record.LAYOUT_CASES[name]
      inputs = make_inputs()
      out = jax.eval_shape(fn, *inputs)
      return inputs, out.size, out.dtype, lambda bits: bits
    # Bitcasts and rolls move bits, NaN payloads included, and the rest
    # make no NaN: every bit must match.
    self._check_bits('layout', record.layout, describe, rules=())

  def test_scalar_as_on_the_tpu(self):
    def describe(name):
      fn = record.SCALAR_CASES[name][0]
      inputs = record.scalar_inputs(name)
      dtype = jax.eval_shape(fn, *[x[0] for x in inputs]).dtype
      return inputs, inputs[0].size, dtype, lambda bits: bits
    self._check_bits('scalar', record.scalar, describe)

  def test_pack_as_on_the_tpu(self):
    def describe(name):
      fn = record.PACK_CASES[name][0]
      inputs = record.pack_inputs(name)
      if name == 'pack_float32_to_bfloat16':
        # Compared as the bfloat16 halves of each word, from the float32
        # value of each source in turn.
        return ([np.stack(inputs, -1).reshape(-1)], 2048, jnp.bfloat16,
                lambda bits: _bits_of_halves(bits, 2))
      out = jax.eval_shape(fn, *inputs)
      if name.startswith('unpack_bfloat16'):
        # The rules see the bfloat16 half of each word that is unpacked.
        half = inputs[0].view(np.uint32) >> (16 * int(name[-1])) & 0xFFFF
        inputs = [half.astype(np.uint16).view(ml_dtypes.bfloat16)]
      return inputs, out.size, out.dtype, lambda bits: bits
    # Patch 0034 packs and unpacks subnormals and NaN as the TPU does:
    # every bit must match.
    self._check_bits('pack', record.pack, describe, rules=())

  def test_masked_loads_and_stores_as_on_the_tpu(self):
    def describe(name):
      _, shape, dtype, _ = record.MASKED_CASES[name]
      return (list(record.masked_inputs(name)), int(np.prod(shape)), dtype,
              lambda bits: bits)
    self._check_bits('masked', record.masked, describe, rules=())

  def test_revisited_outputs_as_on_the_tpu(self):
    def describe(name):
      x = record.revisit_input(name)
      expected = _expected_revisit(name, x)
      return [x], expected.size, np.float32, lambda bits: bits
    self._check_bits('revisit', record.revisit, describe, rules=())
    for data, where in self._recordings('revisit'):
      for entry in data['revisit']:
        name = entry['name']
        expected = _expected_revisit(name, record.revisit_input(name))
        np.testing.assert_array_equal(
            np.array(entry['result'], np.uint32).view(np.float32),
            expected.reshape(-1), f'{name}: {where}')

  def test_emit_pipeline_as_on_the_tpu(self):
    self._skip_before('pipeline')
    params = pltpu.InterpretParams(device_kind='TPU v5 lite')
    def describe(name):
      x = record.pipeline_input(name)
      return [x], x.size, np.float32, lambda bits: bits
    # emit_pipeline asks for the TPU's tiling while the kernel is traced.
    with pltpu.force_tpu_interpret_mode(params):
      self._check_bits('pipeline', record.pipeline, describe, rules=(),
                       params=params)
    for data, where in self._recordings('pipeline'):
      for entry in data['pipeline']:
        name = entry['name']
        expected = _EXPECTED_PIPELINE[name](record.pipeline_input(name))
        np.testing.assert_array_equal(
            np.array(entry['result'], np.uint32).view(np.float32),
            expected.reshape(-1), f'{name}: {where}')

  def test_emit_pipeline_grid_queries_as_on_the_tpu(self):
    # `pl.program_id` and `pl.num_programs` in the body of a pipeline are the
    # pipeline's, with and without the emit_pipeline primitive, also in a
    # kernel with a grid of its own, as on the TPU. One exception, of the
    # TPU's jax: jax 0.10.2's Mosaic lowering of the primitive gives a grid
    # read at run time the kernel's iteration bound (`tpu.iteration_bound`;
    # its compiler aborts where the kernel has no grid), and jax 0.11.0's on
    # the pipeline's (`emit_pipeline_mode`), which interpret mode follows.
    self._skip_before('pipeline_grid')
    params = pltpu.InterpretParams(device_kind='TPU v5 lite')

    def expected(name, sizes):
      # Block (i, j) holds (i * 16 + n0) + (j * 16 + n1) * 256.
      _, grid, _ = record.PIPELINE_GRID_CASES[name]
      blocks = np.zeros((grid + (1,))[:2], np.float32)
      for ids in np.ndindex(*grid):
        blocks[(ids + (0,))[:2]] = sum(
            (i * 16 + n) * 256**a for a, (i, n) in enumerate(zip(ids, sizes)))
      return np.kron(blocks, np.ones((8, 128), np.float32)).reshape(-1)

    checked = 0
    for data, where in self._recordings('pipeline_grid'):
      for entry in data['pipeline_grid']:
        name, primitive = entry['name'], entry['primitive']
        kernel_grid, grid, run_time = record.PIPELINE_GRID_CASES[name]
        with self.subTest(recording=where, name=name, primitive=primitive):
          with pltpu.force_tpu_interpret_mode(params):
            ours = np.array(record.pipeline_grid(
                name, primitive, interpret=params), np.uint32)
          np.testing.assert_array_equal(ours.view(np.float32),
                                        expected(name, grid))
          old_lowering = (primitive and run_time
                          and tuple(map(int, data['jax'].split('.')[:2]))
                          < (0, 11))
          if not old_lowering:
            self.assertEqual(entry['result'], ours.tolist())
          elif kernel_grid:
            np.testing.assert_array_equal(
                np.array(entry['result'], np.uint32).view(np.float32),
                expected(name, kernel_grid))
          else:
            self.assertIn('Check failed', entry['error'])
          checked += 1
    self.assertGreater(checked, 0)

  def test_regular_semaphores_as_on_the_tpu(self):
    def run(case, params):
      return record.semaphore(case['name'], interpret=params)
    self._check('semaphore', run)

  def test_errors_as_on_the_tpu(self):
    self._skip_before('reject')
    params = pltpu.InterpretParams()
    for data, where in self._recordings('reject'):
      for entry in data['reject']:
        name = entry['name']
        tpu = entry['result']
        with self.subTest(recording=where, name=name):
          got = record.reject(name, interpret=params)
          if name == 'non_decrementing_wait':
            # jax's lowering means to reject a wait with decrement=False,
            # but the flag reaches it as an MLIR value, never False: the
            # TPU compiled the wait and it decremented (the count after
            # it was 1, not 2). Interpret mode raises, naming its flag
            # (what the lowering means), and with the flag does not
            # decrement.
            self.assertEqual(tpu, {'output': 1.0})
            self.assertEqual(got['raised'], 'NotImplementedError')
            self.assertIn('allow_non_decrementing_semaphore_wait',
                          got['message'])
            allowed = pltpu.InterpretParams(
                allow_non_decrementing_semaphore_wait=True)
            self.assertEqual(record.reject(name, interpret=allowed),
                             {'output': 2.0})
          elif name == 'vmem_oom' and jax.__version_info__ >= _SINCE['vmem']:
            # The scratch does not fit in the VMEM of the recording's TPU:
            # XLA's allocator said so there, #52 here, in the same words.
            got = record.reject(name, interpret=pltpu.InterpretParams(
                device_kind=data['device_kind']))
            self.assertEqual(got['raised'], tpu['raised'])
            for pattern in (r'RESOURCE_EXHAUSTED: Allocation \(size=\d+\) would'
                            r' exceed memory \(size=\d+\)',
                            r"space=vmem, size = 0x[0-9a-f]+, scoped, tag ="
                            r" 'scratch operand'"):
              self.assertEqual(re.findall(pattern, got['message']),
                               re.findall(pattern, tpu['message']))
          elif ('reject', name) in ACCEPTED_BY_INTERPRET_MODE:
            cls, message = ACCEPTED_BY_INTERPRET_MODE['reject', name]
            self.assertEqual(tpu['raised'], cls)
            self.assertIn(message, tpu['message'])
            self.assertIn('output', got)
          else:
            self.assertEqual(got, tpu, where)

  def _check_vmem_probe(self, recording):
    """Runs vmem_probe's cases of a recording; compares with the TPU's."""
    data = json.loads((ROOT / 'hardware' / 'probes' / recording).read_text())
    params = pltpu.InterpretParams(device_kind=data['device_kind'])
    for name, tpu in data['cases'].items():
      with self.subTest(recording=recording, name=name):
        with pltpu.force_tpu_interpret_mode(params):
          try:
            jax.block_until_ready(vmem_probe.CASES[name]())
            got = 'ok'
          except Exception as e:  # pylint: disable=broad-except
            # JaxRuntimeError, or the LoweringException of Mosaic's lowering
            # (jax._src.pallas.mosaic.lowering, which this file does not
            # import: with jax 0.8 and 0.9 that import, before
            # jax.experimental.pallas's, is circular).
            if type(e).__name__ not in ('JaxRuntimeError',
                                        'LoweringException'):
              raise
            got = {'raised': type(e).__name__, 'message': str(e)}
        if tpu == 'ok':
          self.assertEqual(got, 'ok')
          continue
        self.assertIsInstance(got, dict, name)
        self.assertEqual(got['raised'], tpu['raised'])
        if tpu['raised'] == 'LoweringException':
          self.assertEqual(got['message'], tpu['message'])
          continue
        # Which limit, and its size and the size used.
        for pattern in (r'Used \S+ of \S+ vmem\. Exceeded vmem capacity by \S+',
                        r'Scoped allocation with size \S+ and limit \S+'
                        r' exceeded scoped vmem limit by \S+'):
          self.assertEqual(re.findall(pattern, got['message']),
                           re.findall(pattern, tpu['message'])[:1])
        tags = re.findall(r'Tag: (.*?) The u8 shape.*?(This allocation .*?)\n',
                          tpu['message'])
        for window, buffering in tags:
          self.assertIn(f'{window} {buffering}', got['message'])

  def test_vmem_out_of_memory_as_on_the_tpu(self):
    # hardware/probes/vmem_probe.py's kernels around the VMEM, the default
    # scoped VMEM limit and vmem_limit_bytes of a TPU v5e: interpret mode
    # accepts what the TPU accepted and rejects what it rejected, with the
    # same error class, the same sizes and the same description of each
    # window.
    self._skip_before('vmem')
    with mock.patch.dict(os.environ):
      os.environ.pop('LIBTPU_INIT_ARGS', None)
      self._check_vmem_probe('vmem_probe_tpu_v5_lite.json')

  def test_vmem_limit_flag_as_on_the_tpu(self):
    # The same kernels with libtpu's --xla_tpu_scoped_vmem_limit_kib of 64
    # and 8 MiB, which set the default scoped VMEM limit on the TPU.
    self._skip_before('vmem')
    for recording in ('vmem_probe_scoped_64mib_tpu_v5_lite.json',
                      'vmem_probe_scoped_8mib_tpu_v5_lite.json'):
      flags = json.loads((ROOT / 'hardware' / 'probes' /
                          recording).read_text())['LIBTPU_INIT_ARGS']
      self.assertIn('--xla_tpu_scoped_vmem_limit_kib=', flags)
      with mock.patch.dict(os.environ, {'LIBTPU_INIT_ARGS': flags}):
        self._check_vmem_probe(recording)

  def test_internal_scratch_size_as_on_the_tpu(self):
    # hardware/probes/internal_scratch_probe.py's copy kernel under internal
    # scratch sizes from 0 to 256 MiB: interpret mode rejects what the TPU
    # rejected, with its message, and runs what it ran.
    self._skip_before('vmem')
    data = json.loads((ROOT / 'hardware' / 'probes' /
                       'internal_scratch_probe_tpu_v5_lite.json').read_text())
    params = pltpu.InterpretParams(device_kind=data['device_kind'])
    cases = [c for c in data['cases'] if c['kernel'] == 'copy']
    self.assertLen(cases, 27)
    for tpu in cases:
      size = tpu['internal_scratch_in_bytes']
      with self.subTest(size=size):
        with pltpu.force_tpu_interpret_mode(params):
          got = internal_scratch_probe.run('copy', size)
        if 'error' not in tpu:
          self.assertEqual(got, {'result': 'ok', 'max_abs_diff': 0.0})
          continue
        self.assertEqual(got.get('error'), tpu['error'])
        if tpu['message'].startswith('INVALID_ARGUMENT'):
          self.assertEqual(got['message'], tpu['message'])
        else:  # Up to the allocation's number and the custom call's name.
          self.assertEqual(got['message'].split(' :: ')[0],
                           tpu['message'].split(' :: ')[0])
          self.assertEqual(
              got['message'].split(' :: ')[1],
              tpu['message'].split(' :: ')[1].replace('#allocation1 ', '')
              .replace('{1,0:T(1,128)}', ''))

  def test_integer_widths_as_on_the_tpu(self):
    # hardware/probes/integer_width_probe.py: integer operations on SMEM
    # scalars and VMEM vectors of each width. Interpret mode, simulating the
    # recording's TPU, rejects what the TPU rejected, with the same
    # MosaicError and the first line of its message (a legalization error up
    # to the MLIR operation it prints), and computes what the TPU computed
    # (the narrow widths; the TPU's results equal NumPy's in the recording).
    self._skip_before('integer_width')
    data = json.loads((ROOT / 'hardware' / 'probes' /
                       'integer_width_probe_tpu_v5_lite.json').read_text())
    params = pltpu.InterpretParams(device_kind=data['device_kind'])
    prefix = 'INTERNAL: Mosaic failed to compile TPU kernel: '
    checked = 0
    for tpu in data['cases']:
      if tpu.get('error') == 'TypeError':  # jnp.abs of int4: jax rejects it.
        continue
      if 'error' not in tpu:
        self.assertTrue(tpu['equal'], tpu)
        if tpu['dtype'] in ('int32', 'uint32'):
          continue
        if (jax.__version_info__[:3] == (0, 10, 1) and tpu['kind'] == 'scalar'
            and tpu['dtype'] in ('int4', 'uint4')):
          # Stock jax 0.10.1's interpreter loads and stores 4-bit SMEM
          # scalars wrongly (other values from run to run; 0.10.2 does not).
          continue
      checked += 1
      with self.subTest(kind=tpu['kind'], op=tpu['op'], dtype=tpu['dtype']):
        got = integer_width_probe.run(tpu['kind'], tpu['op'], tpu['dtype'],
                                      interpret=params)
        if 'error' not in tpu:
          self.assertIs(got.get('equal'), True, got)
          continue
        self.assertEqual(got.get('error'), 'MosaicError', got)
        want = tpu['message'].removeprefix(prefix).split('\n')[0]
        if want.startswith('failed to legalize operation'):
          want = want.split(':')[0]
        self.assertEqual(got['message'].removeprefix(prefix).split('\n')[0],
                         want)
    self.assertEqual(checked, 337 if jax.__version_info__[:3] != (0, 10, 1)
                     else 330)

  def test_semaphore_memory_as_on_the_tpu(self):
    # hardware/probes/semaphore_memory_probe.py: a copy into an int32 array
    # in SEMAPHORE memory, which the TPU did not run (XLA's compiler aborted
    # the process, or Mosaic rejected the window), and into SMEM. Interpret
    # mode refuses the first two when it lowers the kernel, saying why, and
    # runs the third as the TPU did.
    self._skip_before('semaphore_memory')
    data = json.loads((ROOT / 'hardware' / 'probes' /
                       'semaphore_memory_probe_tpu_v5_lite.json').read_text())
    self.assertLen(data['cases'], 3)
    for tpu in data['cases']:
      with self.subTest(case=tpu['case']):
        got = semaphore_memory_probe.run(tpu['case'], interpret=True)
        if 'error' not in tpu:
          self.assertTrue(tpu['equal'], tpu)
          self.assertIs(got.get('equal'), True, got)
          continue
        self.assertEqual(got.get('error'), 'NotImplementedError', got)
        self.assertIn('of dtype int32 in SEMAPHORE memory in TPU interpret '
                      'mode', got['message'])

  def test_mxu_accumulation_as_on_the_tpu(self):
    # hardware/probes/mxu_accumulation_probe.py: float32 matmuls of bfloat16
    # values, with matmul_precision="tpu" (#48) summed in the MXU's order.
    # One element of the 8,192 is 1 ulp from the chip's (docs/hardware.md).
    self._skip_before('matmul_precision')
    data = json.loads((ROOT / 'hardware' / 'probes' /
                       'mxu_accumulation_probe_tpu_v5_lite.json').read_text())
    self.assertEqual(set(data['cases']), set(mxu_accumulation_probe.CASES))
    for case, encoded in data['cases'].items():
      with self.subTest(case=case):
        tpu = mxu_accumulation_probe.decode(encoded)
        got = mxu_accumulation_probe.run(case, interpret=True)
        ulps = np.abs(got.view(np.int32).astype(np.int64)
                      - tpu.view(np.int32))
        self.assertLessEqual(ulps.max(), 1)
        self.assertEqual(np.count_nonzero(ulps),
                         1 if case == 'dot_k128' else 0)

  def _check_random_bits(self, draws, what):
    """Checks three draws of a `record.prng` case.

    The first and third come from the same seed and must be equal; the
    second must differ; each of the 32 bit positions must be set in 50%
    +- 10% of the first draw's 1024 words (6.4 standard deviations).
    """
    first, second, third = (np.array(d, np.uint32) for d in draws)
    np.testing.assert_array_equal(first, third, f'{what}: seeded again')
    self.assertFalse(np.array_equal(first, second), f'{what}: second draw')
    freq = ((first[:, None] >> np.arange(32, dtype=np.uint32)) & 1).mean(0)
    self.assertLess(np.abs(freq - 0.5).max(), 0.1,
                    f'{what}: how often each bit is set: {freq}')

  def test_prng_as_on_the_tpu(self):
    # The TPU's PRNG is not reproduced (its algorithm is not documented):
    # interpret mode's bits differ, with the same statistics.
    params = pltpu.InterpretParams()
    if (0, 10, 0) <= jax.__version_info__ < _SINCE['prng']:
      # The series for jax 0.10 has no generator (#9 does not carry): its
      # prng_random_bits raises rather than return zeros.
      with self.assertRaisesRegex(NotImplementedError, 'prng_random_bits'):
        record.prng(0, interpret=params)
      return
    if jax.__version_info__ < _SINCE['prng']:
      self.skipTest(f'jax {jax.__version__}: its interpreter gives zeros '
                    'for prng_random_bits (a maintenance-only release)')
    for data, where in self._recordings('prng'):
      for entry in data['prng']:
        with self.subTest(recording=where, seed=entry['seed']):
          self._check_random_bits(entry['result'], where)
          self._check_random_bits(
              record.prng(entry['seed'], interpret=params), 'interpret mode')

  def test_matmul_as_on_the_tpu(self):
    checked = 0
    for data, where in self._recordings('matmul'):
      for entry in data['matmul']:
        dtype, precision = entry['dtype'], entry['precision']
        with self.subTest(recording=where, dtype=dtype, precision=precision):
          if 'result' not in entry:
            # The TPU's jax did not compile it; the recording says why.
            self.assertIn((dtype, precision), NOT_COMPILED)
            self.assertIn(NOT_COMPILED[dtype, precision], entry['error'])
            continue
          tpu = np.array(entry['result'], np.uint64)
          got = np.array(record.matmul(dtype, precision,
                                       interpret=pltpu.InterpretParams()),
                         np.uint64)
          checked += 1
          if (dtype, precision) == ('float32', None):
            # At the default precision the TPU rounds float32 operands to
            # bfloat16 and accumulates in float32: the recording is the
            # float32 matmul of the rounded operands, bit for bit.
            a, b = record.matmul_inputs(dtype)
            rounded = (a.astype(ml_dtypes.bfloat16).astype(np.float32)
                       @ b.astype(ml_dtypes.bfloat16).astype(np.float32))
            np.testing.assert_array_equal(
                tpu.astype(np.uint32).view(np.float32), rounded.reshape(-1))
            # Interpret mode multiplies the float32 values by default, and
            # as the TPU does with matmul_precision="tpu" (patch 0048).
            self.assertFalse(np.array_equal(got, tpu))
            if jax.__version_info__ >= _SINCE['matmul_precision']:
              got = np.array(record.matmul(
                  dtype, precision,
                  interpret=pltpu.InterpretParams(matmul_precision='tpu')),
                             np.uint64)
              np.testing.assert_array_equal(got, tpu, where)
          elif (dtype, precision) in ULP_TOLERANCE:
            diff = np.abs(_ordered(tpu) - _ordered(got))
            self.assertLessEqual(int(diff.max()),
                                 ULP_TOLERANCE[dtype, precision])
          else:
            np.testing.assert_array_equal(got, tpu, f'{dtype}: {where}')
    self.assertGreater(checked, 0)


def _ordered(bits):
  """float32 bit patterns as integers in the order of their values."""
  bits = np.asarray(bits, np.int64)
  return np.where(bits >= 0x80000000, 0x80000000 - bits, bits)


if __name__ == '__main__':
  absltest.main()
