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

"""Helpers shared by the TPU interpret mode tests of semaphores and scopes.

The tests run on every jax release the patch series serves (0.7.2 and newer).
What only older releases need is fenced by `# Older jax releases: begin.` and
`# Older jax releases: end.`; `python -m jax_fork export-upstream` replaces
each fence by its `# At jax HEAD:` lines (see `jax_fork/upstream.py`).
"""

import contextlib
import dataclasses
import faulthandler
# Older jax releases: begin.
import functools
import importlib
import inspect
# Older jax releases: end.
import threading

import jax
# Older jax releases: begin.
from jax._src import dispatch
# Older jax releases: end.
from jax._src import test_util as jtu
# Older jax releases: begin.
from jax.experimental import pallas as pl
# Older jax releases: end.
from jax.experimental.pallas import tpu as pltpu
# Older jax releases: begin.
import jax.numpy as jnp
# At jax HEAD: from jax._src.pallas.mosaic.interpret import interpret_pallas_call as mosaic_interpret

# Up to jax 0.7, the TPU interpreter is the single module `interpret`.
try:
  mosaic_interpret = importlib.import_module(
      'jax._src.pallas.mosaic.interpret.interpret_pallas_call'
  )
except ModuleNotFoundError:
  mosaic_interpret = importlib.import_module(
      'jax._src.pallas.mosaic.interpret'
  )
# Older jax releases: end.


# Seconds a kernel may run before it is failed as a hang.
_KERNEL_TIMEOUT_S = 60.0


@contextlib.contextmanager
def fail_instead_of_hanging(timeout_s: float = _KERNEL_TIMEOUT_S):
  """Turns a kernel that never finishes into an error.

  After `timeout_s` seconds, writes every thread's stack to stderr (where
  each core was when the time ran out), marks the interpreter's shared memory
  as failed, which makes every core that is blocked in a wait raise, and then
  resets the interpreter's state for the tests that follow. If the process is
  still stuck `timeout_s` seconds later, `faulthandler` dumps every thread's
  stack and exits the process with an error.

  Args:
    timeout_s: The time limit in seconds.

  Yields:
    Nothing.
  """

  fired = threading.Event()

  def abort():
    fired.set()
    faulthandler.dump_traceback(all_threads=True)
    error = TimeoutError(f'kernel did not finish within {timeout_s} s')
    # Older jax releases: begin.
    # At jax HEAD: shared_memory = mosaic_interpret._shared_memory
    # At jax HEAD: if shared_memory is not None:
    # At jax HEAD:   shared_memory.set_failed(error, top_level=False)
    _set_failed(error)
    # Older jax releases: end.

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


class InterpretTestCase(jtu.JaxTestCase):
  """A test case like upstream's `InterpretTest`, with a hang guard.

  Each test class of this directory holds the tests of one patch of the
  series; `python -m jax_fork export-upstream` writes it into upstream's
  `tpu_pallas_interpret_test.py` as a `jtu.JaxTestCase` with the decorators
  and `setUp` of upstream's `InterpretTest`, and its methods unchanged but
  for the code fenced for older releases. What upstream's `setUp` does is
  done here; the hang guard (`fail_instead_of_hanging`) is ours only.
  """

  def setUp(self):
    super().setUp()
    if not jtu.test_device_matches(['cpu']):
      self.skipTest('CPU-only test')
    if jax.device_count() > 1:
      # Workaround for https://github.com/jax-ml/jax/issues/25671
      self.skipTest(f'requires 1 device, found {jax.device_count()}')
    self.enter_context(fail_instead_of_hanging())


class InterpretDistributedTestCase(jtu.JaxTestCase):
  """A test case like upstream's `InterpretDistributedTest`, with a hang guard.

  Classes derived from it go to upstream's
  `tpu_pallas_interpret_distributed_test.py`, with the decorators and `setUp`
  of `InterpretDistributedTest` (see `InterpretTestCase`).
  """

  def setUp(self):
    super().setUp()
    if not jtu.test_device_matches(['cpu']):
      self.skipTest('CPU-only test')
    if jax.device_count() < 4:
      self.skipTest(f'requires at least 4 devices, found {jax.device_count()}')
    self.enter_context(fail_instead_of_hanging())


def interpret_params(**kwargs) -> pltpu.InterpretParams:
  """Returns `InterpretParams` of the fields given, on every served release.

  Fields that a release names differently are renamed; those it lacks, and
  whose absence means what the tests ask (`on_race='warn'`: releases before
  jax 0.12 record races and never raise), are dropped.

  Args:
    **kwargs: Fields of `InterpretParams`, as jax HEAD names them.

  Returns:
    The parameters.
  """
  # Older jax releases: begin.
  fields = {f.name for f in dataclasses.fields(pltpu.InterpretParams)}
  if kwargs.get('on_race') == 'warn' and 'on_race' not in fields:
    del kwargs['on_race']
  if 'num_cores_or_threads' in kwargs and 'num_cores_or_threads' not in fields:
    old_name = (
        'num_cores_or_threads_per_device'
        if 'num_cores_or_threads_per_device' in fields
        else 'num_cores_per_device'
    )
    kwargs[old_name] = kwargs.pop('num_cores_or_threads')
  if (
      'allow_hbm_allocation_in_run_scoped' in kwargs
      and 'allow_hbm_allocation_in_run_scoped' not in fields
  ):
    # Releases without the field always allow it.
    del kwargs['allow_hbm_allocation_in_run_scoped']
  # Older jax releases: end.
  return pltpu.InterpretParams(**kwargs)


def tensorcore_mesh(*, axis_name: str, num_cores: int):
  """Returns a `pltpu.TensorCoreMesh` of `num_cores` TensorCores.

  Args:
    axis_name: The name of the core axis.
    num_cores: The number of cores.

  Returns:
    The mesh.
  """
  # Older jax releases: begin.
  # At jax HEAD: return pltpu.TensorCoreMesh(
  # At jax HEAD:     axis_name=axis_name, num_cores=num_cores
  # At jax HEAD: )
  # `pltpu.TensorCoreMesh(axis_name=..., num_cores=...)` is public from jax
  # 0.11; older releases make the same mesh with `create_tensorcore_mesh`.
  if hasattr(pltpu, 'TensorCoreMesh'):
    return pltpu.TensorCoreMesh(axis_name=axis_name, num_cores=num_cores)
  return pltpu.create_tensorcore_mesh(axis_name, num_cores=num_cores)
  # Older jax releases: end.


def tpu_v6e() -> jax.sharding.AbstractDevice:
  """Returns an abstract TPU v6e: 2 SparseCores of 16 subcores, 8 lanes.

  SparseCore meshes on CPU need the description of a TPU chip, given by
  `jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), (),
  abstract_device=tpu_v6e()))`. At jax HEAD this is
  `jax.sharding.AbstractDevice('TPU v6e', 1, 'tpu')`; jax 0.10.0's
  `AbstractDevice` has no `platform`.
  """
  # Older jax releases: begin.
  parameters = inspect.signature(jax.sharding.AbstractDevice).parameters
  if 'platform' not in parameters:
    return jax.sharding.AbstractDevice('TPU v6e', 1)
  # Older jax releases: end.
  return jax.sharding.AbstractDevice('TPU v6e', 1, 'tpu')


# Older jax releases: begin.
# Shims for the public APIs that older jax releases lack or name differently.
# export-upstream writes their HEAD equivalents where they are used
# (HEAD_EQUIVALENTS in jax_fork/upstream.py).


def _set_failed(error: Exception) -> None:
  """Marks the interpreter's shared memory (if any) as failed with `error`."""
  if hasattr(mosaic_interpret, '_shared_memory'):
    shared_memory = mosaic_interpret._shared_memory
  else:
    # jax 0.8.0 keeps it in the interpreter's `shared_memory` module.
    shared_memory = mosaic_interpret.memory._shared_memory
  if shared_memory is None:
    return
  # `top_level` exists only where cores and devices fail separately.
  kwargs = {}
  if 'top_level' in inspect.signature(shared_memory.set_failed).parameters:
    kwargs['top_level'] = False
  shared_memory.set_failed(error, **kwargs)


def reset_after_failure():
  """Resets TPU interpret mode and JAX's effect tokens after a kernel failed.

  At jax HEAD this is `pltpu.reset_tpu_interpret_mode_state()`.
  `jax.effects_barrier()` re-raises the failure of the computation (one error,
  or a group of them) and drops the failed computation's tokens for ordered
  effects. Older JAX runtimes raise without dropping them, and then fail every
  later computation with ordered effects on the same devices with the same
  error; this drops them there too.
  """
  pltpu.reset_tpu_interpret_mode_state()
  try:
    jax.effects_barrier()
  except Exception:  # pylint: disable=broad-exception-caught
    dispatch.runtime_tokens.clear()


def kernel(**kwargs):
  """Returns `pl.kernel(**kwargs)`, with argument names this jax accepts.

  At jax HEAD this is `pl.kernel`. Older releases call `out_type` and
  `scratch_types` `out_shape` and `scratch_shapes`, and the oldest have no
  `pl.kernel`.

  Args:
    **kwargs: Keyword arguments of `pl.kernel`.

  Returns:
    The result of `pl.kernel`, e.g. a decorator for the kernel body.
  """
  if not hasattr(pl, 'kernel'):
    return _kernel_from_core_map(**kwargs)
  parameters = inspect.signature(pl.kernel).parameters
  for name, old_name in (
      ('out_type', 'out_shape'),
      ('scratch_types', 'scratch_shapes'),
  ):
    if name in kwargs and name not in parameters:
      kwargs[old_name] = kwargs.pop(name)
  return pl.kernel(**kwargs)


def _kernel_from_core_map(
    *, out_type, mesh, scratch_types=(), interpret=False
):
  """Returns a decorator like `pl.kernel`, for releases without `pl.kernel`.

  As `pl.kernel` does, it runs the body in a `pl.core_map` over `mesh`, on refs
  to the operands and outputs, with the scratch allocated by `pl.run_scoped`.

  Args:
    out_type: A `jax.ShapeDtypeStruct`, or a tuple or list of them.
    mesh: The mesh to run the kernel on.
    scratch_types: The types of the scratch buffers and semaphores.
    interpret: The interpret mode parameters.

  Returns:
    A decorator that turns a kernel body into a function of the operands.
  """
  unwrap = not isinstance(out_type, (tuple, list))
  out_types = (out_type,) if unwrap else tuple(out_type)

  def decorator(body):
    @jax.jit
    def wrapper(*operands):
      def stateful(refs):
        in_refs, out_refs = refs

        @pl.core_map(mesh, interpret=interpret)
        def _():
          pl.run_scoped(
              functools.partial(body, *in_refs, *out_refs), *scratch_types
          )

      outs = tuple(jnp.zeros(t.shape, t.dtype) for t in out_types)
      _, outs = pl.run_state(stateful)((operands, outs))
      return outs[0] if unwrap else outs

    return wrapper

  return decorator
# Older jax releases: end.
