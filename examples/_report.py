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

"""Prints the (name, result, expected) rows of an example and checks them.

Every example module exposes `run() -> list[tuple[str, np.ndarray,
np.ndarray]]` and ends with::

  if __name__ == '__main__':
    sys.exit(_report.main(run, FEATURE))

where `FEATURE` is a module-level string saying which feature the example
shows (`run_all.py` reads it for its summary). Integer and boolean rows are
compared exactly, floating point rows with `np.testing.assert_allclose`
tolerances. The exit code is 0 if every row matches, `MISMATCH_EXIT_CODE`
if one does not, `SKIPPED_EXIT_CODE` if `run` raised `Unsupported` (this jax
cannot run the example; it prints `skipped: <reason>`), and 1, Python's, on
an uncaught error.
"""

from collections.abc import Callable, Iterator, Sequence
import contextlib
import dataclasses
import functools
import importlib
import inspect

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import jax.numpy as jnp
import numpy as np

try:
  mosaic_interpret = importlib.import_module(
      'jax._src.pallas.mosaic.interpret.interpret_pallas_call'
  )
except ModuleNotFoundError:
  # Up to jax 0.7, the TPU interpreter is the single module `interpret`.
  mosaic_interpret = importlib.import_module(
      'jax._src.pallas.mosaic.interpret'
  )

Row = tuple[str, np.ndarray, np.ndarray]

# The exit code of an example whose results differ from the expected values.
MISMATCH_EXIT_CODE = 3

# The exit code of an example that this jax cannot run (`Unsupported`).
SKIPPED_EXIT_CODE = 4


class Unsupported(Exception):
  """Raised by an example's `run` when this jax cannot run it; says why."""


def sparsecore_unsupported() -> str | None:
  """Says why this jax cannot run SparseCore kernels in interpret mode.

  Returns:
    None if it can (jax 0.10.0 and newer, with the series' patch 0007), else
    the reason.
  """
  if jax.__version_info__ < (0, 10, 0):
    return ('jax 0.9 and older: plsc.VectorSubcoreMesh is not a Pallas Mesh'
            ' (it has its own core_map rule), and their series have no'
            ' SparseCore patch (0007)')
  return None


@contextlib.contextmanager
def tpu_v6e() -> Iterator[None]:
  """Describes a TPU v6e chip, whose SparseCore meshes can then be built.

  On CPU, `plsc.VectorSubcoreMesh` needs to know the TPU it targets: a v6e
  has 2 SparseCores of 16 vector subcores with 8 lanes.

  Yields:
    Nothing.
  """
  # jax 0.10.0's `AbstractDevice` has no `platform`.
  if 'platform' in inspect.signature(jax.sharding.AbstractDevice).parameters:
    device = jax.sharding.AbstractDevice('TPU v6e', 1, 'tpu')
  else:
    device = jax.sharding.AbstractDevice('TPU v6e', 1)
  with jax.sharding.use_abstract_mesh(
      jax.sharding.AbstractMesh((), (), abstract_device=device)
  ):
    yield

# Values shown per array before it is abbreviated with '...'.
_NUM_SHOWN = 4


def interpret_params(**kwargs) -> pltpu.InterpretParams:
  """Returns `InterpretParams` that warn, rather than raise, on races.

  `InterpretParams(on_race=...)` exists from jax 0.12; older versions always
  record races in `races_found` and print them.

  Args:
    **kwargs: Passed on to `pltpu.InterpretParams`.

  Returns:
    The interpret params.
  """
  fields = {f.name for f in dataclasses.fields(pltpu.InterpretParams)}
  if kwargs.get('detect_races') and 'on_race' in fields:
    kwargs['on_race'] = 'warn'
  return pltpu.InterpretParams(**kwargs)


def kernel(**kwargs):
  """Returns `pl.kernel(**kwargs)`, with argument names this jax accepts.

  `pl.kernel` takes `out_type` and `scratch_types`; older versions call them
  `out_shape` and `scratch_shapes`.

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
  """Returns a decorator like `pl.kernel`, for versions without `pl.kernel`.

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


def render(x: np.ndarray) -> str:
  """Renders an array compactly: shape, dtype, first values and a checksum.

  Args:
    x: Any array.

  Returns:
    E.g. `f32[64,128] [0.42 1 -0.17 0.9 ...] sum=12.5`.
  """
  x = np.asarray(x)
  flat = x.reshape(-1)
  shown = ' '.join(f'{v:.4g}' if x.dtype.kind == 'f' else str(v)
                   for v in flat[:_NUM_SHOWN])
  if flat.size > _NUM_SHOWN:
    shown += ' ...'
  dims = ','.join(map(str, x.shape))
  text = f'{x.dtype.name}[{dims}] [{shown}]'
  if flat.size > _NUM_SHOWN:
    text += f' sum={flat.sum(dtype=np.float64):.6g}'
  return text


def matches(result: np.ndarray, expected: np.ndarray) -> bool:
  """Whether `result` equals `expected`: exactly unless floating point.

  Args:
    result: The array the kernel computed.
    expected: The array computed independently, with the same shape.

  Returns:
    True if they match.
  """
  result, expected = np.asarray(result), np.asarray(expected)
  try:
    if expected.dtype.kind == 'f' or result.dtype.kind == 'f':
      np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-6)
    else:
      np.testing.assert_array_equal(result, expected, strict=True)
  except AssertionError:
    return False
  return True


def report(rows: Sequence[Row]) -> int:
  """Prints one line per row and returns the number of mismatched rows.

  Args:
    rows: (name, result, expected) triples.

  Returns:
    How many rows did not match.
  """
  width = max((len(name) for name, _, _ in rows), default=0)
  mismatched = 0
  for name, result, expected in rows:
    ok = matches(result, expected)
    mismatched += not ok
    print(f'{name:<{width}}  {"ok" if ok else "MISMATCH"}')
    print(f'  result:   {render(result)}')
    print(f'  expected: {render(expected)}')
  return mismatched


def main(run: Callable[[], Sequence[Row]], feature: str) -> int:
  """Runs an example and prints its rows.

  Args:
    run: The example's `run`.
    feature: What the example shows, printed first.

  Returns:
    The process exit code: 0, `MISMATCH_EXIT_CODE` if a row mismatched, or
    `SKIPPED_EXIT_CODE` if `run` raised `Unsupported`.
  """
  print(f'shows: {feature}')
  try:
    rows = run()
  except Unsupported as e:
    print(f'skipped: {e}')
    return SKIPPED_EXIT_CODE
  return MISMATCH_EXIT_CODE if report(rows) else 0
