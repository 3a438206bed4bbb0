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

"""Tests that TPU interpret mode's errors name the kernel's line and argument.

Out-of-bounds accesses and race reports name the kernel argument whose buffer
is accessed and the kernel's source line of the access, also for the DMAs of
`pltpu.sync_copy`, which jax traces inside a `run_scoped`, and for a DMA that
is never waited for; deadlock reports and semaphores left non-zero at kernel
exit name the semaphore's argument.

To work around https://github.com/jax-ml/jax/issues/25671 , this file
contains only tests that do not use shard_map.
"""

import contextlib
import inspect
import io
import logging
import os
import re

from absl.testing import absltest
import jax
from jax._src import test_util as jtu
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import tpu_interpret_test_util as test_util
from tpu_interpret_test_util import mosaic_interpret


jax.config.parse_flags_with_absl()


# TODO(jburnim): Figure out how to safely run different instance of TPU
# interpret mode in parallel, and then remove this decorator.
@jtu.thread_unsafe_test_class()
class InterpretErrorLocationTest(test_util.InterpretTestCase):

  def setUp(self):
    super().setUp()
    # Older jax releases: begin.
    shared_memory = getattr(mosaic_interpret, 'memory', None)
    if not hasattr(getattr(shared_memory, 'SharedMemory', None),
                   'describe_buffer'):
      self.skipTest('jax 0.10.x and older: their series have no such patch')
    # Older jax releases: end.

  def _line_of(self, function, text: str) -> str:
    """Returns "<file>:<line>:" of the line of `function` that holds `text`."""
    source, first = inspect.getsourcelines(function)
    (offset,) = [i for i, line in enumerate(source) if text in line]
    return f'{os.path.basename(__file__)}:{first + offset}:'

  @contextlib.contextmanager
  def _race_reports(self):
    """Collects the race reports, logged (or printed, before jax 0.12)."""
    reports = io.StringIO()
    handler = logging.StreamHandler(reports)
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    try:
      with contextlib.redirect_stdout(reports):
        yield reports
    finally:
      logging.getLogger().removeHandler(handler)

  def test_out_of_bounds_load_names_argument_and_line(self):
    def kernel(start_ref, x_ref, o_ref):
      o_ref[...] = x_ref[pl.ds(start_ref[0], 8), :]

    call = pl.pallas_call(
        kernel,
        in_specs=[
            pl.BlockSpec(memory_space=pltpu.SMEM),
            pl.BlockSpec(memory_space=pltpu.VMEM),
        ],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        interpret=test_util.interpret_params(),
    )
    x = jnp.ones((16, 128), jnp.float32)
    line = re.escape(self._line_of(kernel, 'x_ref[pl.ds'))
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'Out-of-bounds read of x_ref \(vmem buffer \d+ of device 0, core 0\)'
        rf' at .*{line}\d+ \(.*kernel\):'
        r' reading \[12:20, 0:128\] but buffer has shape \(16, 128\)\.',
    ):
      jax.block_until_ready(call(jnp.array([12], jnp.int32), x))
    test_util.reset_after_failure()

  def test_out_of_bounds_dma_names_argument_and_line(self):
    def kernel(x_hbm, o_ref, buf, sem):
      start = pl.program_id(0) * 12  # 12 in the second step: out of bounds.
      copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, 8)], buf, sem)
      copy.start()
      copy.wait()
      o_ref[...] = buf[...]

    call = pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_shapes=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=test_util.interpret_params(),
    )
    line = re.escape(self._line_of(kernel, 'copy.start()'))
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        r'Out-of-bounds read of x_hbm \(hbm buffer \d+ of device 0, core 0\)'
        rf' at .*{line}\d+'
        r' \(.*kernel\): reading \[12:20, 0:128\]',
    ):
      jax.block_until_ready(call(jnp.ones((16, 128), jnp.float32)))
    test_util.reset_after_failure()

  def test_race_report_names_argument_and_lines_of_sync_copy(self):
    # Both cores copy to the same rows of the output, unsynchronized (the
    # tests' parameters report races rather than raise).
    def body(x_hbm, o_hbm, buf):
      pltpu.sync_copy(x_hbm, buf)
      pltpu.sync_copy(buf, o_hbm.at[0])

    call = test_util.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=[pltpu.VMEM((8, 128), jnp.float32)],
        interpret=test_util.interpret_params(detect_races=True, on_race='warn'),
    )(body)
    line = re.escape(self._line_of(body, 'o_hbm.at[0]'))
    with self._race_reports() as reports:
      jax.block_until_ready(call(jnp.ones((8, 128), jnp.float32)))
    self.assertRegex(
        reports.getvalue(),
        r'RACE DETECTED on o_hbm \(hbm buffer \d+ of device 0, core 0\):\n'
        rf'  write of \[0, 0:8, 0:128\] at .*{line}\d+ \(.*body\) by DMA \d+\n'
        rf'  write of \[0, 0:8, 0:128\] at .*{line}\d+ \(.*body\) by DMA \d+\n',
    )
    self.assertTrue(mosaic_interpret.races.races_found)

  def test_race_with_a_dma_never_waited_for_names_argument_and_lines(self):
    # In `eager` mode the DMA copies when it starts; that `on_wait` mode
    # reports the same race is tpu_pallas_interpret_dma_race_test's.
    def kernel(x_hbm, o_ref, buf, sem):
      pltpu.make_async_copy(x_hbm, buf, sem).start()  # Never waited for.
      o_ref[...] = buf[...]

    call = pl.pallas_call(
        kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_shapes=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.DMA,
        ],
        interpret=test_util.interpret_params(
            detect_races=True, on_race='warn', dma_execution_mode='eager'
        ),
    )
    start = re.escape(self._line_of(kernel, '.start()'))
    read = re.escape(self._line_of(kernel, 'o_ref[...] = buf[...]'))
    with self._race_reports() as reports:
      jax.block_until_ready(call(jnp.ones((8, 128), jnp.float32)))
    self.assertRegex(
        reports.getvalue(),
        r'RACE DETECTED on buf \(vmem buffer \d+ of device 0, core 0\):\n'
        rf'  read of \[\.\.\.\] at .*{read}\d+ \(.*kernel\) by device 0,'
        r' core 0\n'
        rf'  write of \[\.\.\.\] at .*{start}\d+ \(.*kernel\) by DMA \d+\n',
    )

  def test_deadlock_report_names_semaphore_argument(self):
    def body(x_hbm, o_hbm, sems):
      del x_hbm, o_hbm
      pl.semaphore_wait(sems.at[1], 1)  # Nothing signals it.

    call = test_util.kernel(
        out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        mesh=test_util.tensorcore_mesh(axis_name='core', num_cores=2),
        scratch_types=[pltpu.SemaphoreType.REGULAR((2,))],
        interpret=test_util.interpret_params(),
    )(body)
    line = re.escape(self._line_of(body, 'pl.semaphore_wait'))
    with self.assertRaisesRegex(
        jax.errors.JaxRuntimeError,
        rf'device 0, core 1: waits at .*{line}\d+ \(.*body\) for semaphore'
        r' \d+ to reach 1; its count is 0\. It is kernel argument sems\[1\]\.',
    ):
      jax.block_until_ready(call(jnp.ones((8, 128), jnp.float32)))
    test_util.reset_after_failure()

  def test_semaphore_left_nonzero_names_argument(self):
    def kernel(o_ref, sem):
      pl.semaphore_signal(sem, 2)
      o_ref[0] = jnp.int32(1)

    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
      jax.block_until_ready(
          pl.pallas_call(
              kernel,
              out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
              out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
              scratch_shapes=[pltpu.SemaphoreType.REGULAR],
              interpret=test_util.interpret_params(),
          )()
      )
    self.assertRegex(
        stdout.getvalue(),
        r'Semaphore \d+ \(kernel argument sem\) has non-zero count .* at'
        r' kernel exit: 2',
    )


if __name__ == '__main__':
  absltest.main(testLoader=jtu.JaxTestLoader())
