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

"""Helpers shared by the TPU interpret mode tests of semaphores and scopes."""

import contextlib
import dataclasses
import faulthandler
import threading

from jax._src.pallas.mosaic.interpret import interpret_pallas_call as mosaic_interpret
from jax.experimental.pallas import tpu as pltpu


# Seconds a kernel may run before it is failed as a hang.
_KERNEL_TIMEOUT_S = 60.0


@contextlib.contextmanager
def fail_instead_of_hanging(timeout_s: float = _KERNEL_TIMEOUT_S):
  """Turns a kernel that never finishes into an error.

  After `timeout_s` seconds, marks the interpreter's shared memory as failed,
  which makes every core that is blocked in a wait raise, and then resets the
  interpreter's state for the tests that follow. If the process is still stuck
  `timeout_s` seconds later, `faulthandler` dumps every thread's stack and
  exits the process with an error.

  Args:
    timeout_s: The time limit in seconds.

  Yields:
    Nothing.
  """

  fired = threading.Event()

  def abort():
    fired.set()
    shared_memory = mosaic_interpret._shared_memory
    if shared_memory is not None:
      shared_memory.set_failed(
          TimeoutError(f'kernel did not finish within {timeout_s} s'),
          top_level=False,
      )

  timer = threading.Timer(timeout_s, abort)
  timer.daemon = True
  timer.start()
  faulthandler.dump_traceback_later(2 * timeout_s, exit=True)
  try:
    yield
  finally:
    timer.cancel()
    faulthandler.cancel_dump_traceback_later()
    if fired.is_set():
      pltpu.reset_tpu_interpret_mode_state()


def interpret_params(**kwargs) -> pltpu.InterpretParams:
  """Returns `InterpretParams` that warn, rather than raise, on races."""
  fields = {f.name for f in dataclasses.fields(pltpu.InterpretParams)}
  if kwargs.get('detect_races') and 'on_race' in fields:
    kwargs['on_race'] = 'warn'
  return pltpu.InterpretParams(**kwargs)


def tensorcore_mesh(axis_name: str, num_cores: int):
  """Returns a `pltpu.TensorCoreMesh` of `num_cores` TensorCores.

  `pltpu.TensorCoreMesh(axis_name=..., num_cores=...)` is public from jax 0.11;
  older versions make the same mesh with `pltpu.create_tensorcore_mesh`.

  Args:
    axis_name: The name of the core axis.
    num_cores: The number of cores.

  Returns:
    The mesh.
  """
  if hasattr(pltpu, 'TensorCoreMesh'):
    return pltpu.TensorCoreMesh(axis_name=axis_name, num_cores=num_cores)
  return pltpu.create_tensorcore_mesh(axis_name, num_cores=num_cores)
