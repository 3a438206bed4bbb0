"""A pytest plugin: upstream's TPU Pallas tests on CPU, as if on a TPU.

``python -m jax_fork coverage`` copies this file into a temporary directory
on ``PYTHONPATH`` and loads it with ``pytest -p``; upstream's test files are
run as they are, never edited. From the outside it

- makes the tests see a TPU: ``jax_test_dut=tpu`` (so
  ``jtu.test_device_matches(["tpu"])`` holds), ``jtu.is_device_tpu``,
  ``jtu.get_tpu_version`` and ``jtu.device_kind_match`` read the chosen
  device kind, every ``jax.Device`` gets ``num_cores``, and
  ``pltpu.get_tpu_info()`` (``jax._src.tpu_info.get_device_kind`` and
  ``get_num_device_cores``), ``pltpu.TensorCoreMesh``'s default core count
  under a mesh of CPU devices, and the megablox (gmm) kernels' device query,
  answer the chosen TPU wherever jax would answer the CPU;
- runs every test (setUp, the test, tearDown) under
  ``pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())``, so every
  ``pallas_call`` and ``core_map`` is interpreted, and stops it with
  ``TimedOut`` (raised by SIGALRM in the main thread, as pytest-timeout's
  signal method does) after ``$JAX_FORK_COVERAGE_TIMEOUT`` seconds; a test
  blocked inside XLA cannot be interrupted so, and the caller kills it;
  then resets TPU interpret mode, so that a kernel that failed does not fail
  the later tests with its error;
- writes one JSON line per event to ``$JAX_FORK_COVERAGE_LOG``:
  ``{"start": nodeid}`` when a test starts (so a hang that must be killed
  is known), then one record per test with its outcome and, for a failure,
  the exception's type and message, the statements of the test file's
  frames in its traceback and the test method's source (what
  ``jax_fork.coverage`` classifies).

With ``JAX_FORK_COVERAGE_TPU=chip`` it does neither of the first two: the
tests run on the machine's own TPU, compiled by Mosaic, with the same
timeouts and records (what interpret mode is compared with).

Environment: ``JAX_FORK_COVERAGE_TPU`` is ``DEVICE_KIND,NUM_CORES`` (e.g.
``TPU v6 lite,1``) or ``chip``; ``JAX_FORK_COVERAGE_EXCLUDE`` optionally
names a file of node ids (one a line) to deselect, the tests an earlier,
killed run of the same file already reached; ``JAX_FORK_COVERAGE_ONLY``
optionally names a file of tests (``FILE_BASENAME::ID``, one a line) to run,
the others deselected (``--against``: the tests that passed on the chip).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import types

import pytest

_LOG = os.environ.get('JAX_FORK_COVERAGE_LOG')
_TIMEOUT = float(os.environ.get('JAX_FORK_COVERAGE_TIMEOUT', '0'))
_ON_CHIP = os.environ.get('JAX_FORK_COVERAGE_TPU') == 'chip'


class TimedOut(Exception):
  """A test ran longer than ``$JAX_FORK_COVERAGE_TIMEOUT`` seconds."""


def _alarm(signum, frame):
  del signum, frame  # Unused.
  raise TimedOut(f'the test ran longer than {_TIMEOUT:g} s')


def _write(record: dict) -> None:
  if _LOG:
    with open(_LOG, 'a', encoding='utf-8') as f:
      f.write(json.dumps(record) + '\n')


class _Device:
  """A jax device that reports the simulated TPU's kind and core count."""

  def __init__(self, device, kind: str, cores: int):
    self._device, self.device_kind, self.num_cores = device, kind, cores

  def __getattr__(self, name):
    return getattr(self._device, name)


class _Bridge:
  """``xla_bridge`` as test_util's device-kind queries see it."""

  def __init__(self, bridge, kind: str, cores: int):
    self._bridge, self._kind, self._cores = bridge, kind, cores

  def devices(self, *args, **kwargs):
    return [_Device(d, self._kind, self._cores)
            for d in self._bridge.devices(*args, **kwargs)]

  def __getattr__(self, name):
    return getattr(self._bridge, name)


def _see_tpu(kind: str, cores: int) -> None:
  """Makes jax's test utilities and TPU queries answer the chosen TPU."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax._src import test_util as jtu  # pylint: disable=g-import-not-at-top
  try:
    from jax._src import tpu_info  # pylint: disable=g-import-not-at-top
  except ImportError:  # jax 0.10 and older.
    from jax._src.pallas.mosaic import tpu_info  # pylint: disable=g-import-not-at-top

  jax.config.update('jax_test_dut', 'tpu')
  # Upstream's own code, reading the device kind from a bridge whose devices
  # are the TPU's (the rest of test_util, e.g. create_mesh, keeps the real
  # devices).
  namespace = dict(vars(jtu), xla_bridge=_Bridge(jtu.xla_bridge, kind, cores))
  for name in ('get_tpu_version', 'is_device_tpu', 'device_kind_match'):
    f = getattr(jtu, name)
    setattr(jtu, name, types.FunctionType(f.__code__, namespace, name,
                                          f.__defaults__, f.__closure__))
  device_type = type(jax.devices()[0])
  if not hasattr(device_type, 'num_cores'):
    device_type.num_cores = property(lambda self: cores)

  real_kind = tpu_info.get_device_kind
  real_cores = tpu_info.get_num_device_cores

  def get_device_kind() -> str:
    found = real_kind()
    return kind if found == 'cpu' else found

  def get_num_device_cores() -> int:
    return cores if real_kind() == 'cpu' else real_cores()

  tpu_info.get_device_kind = get_device_kind
  tpu_info.get_num_device_cores = get_num_device_cores
  _see_tpu_cores_in_meshes(cores)
  try:
    from jax.experimental.pallas.ops.tpu.megablox import common  # pylint: disable=g-import-not-at-top,line-too-long
  except ImportError:
    return
  common.tpu_kind = lambda: kind
  common.is_tpu = lambda: True


def _see_tpu_cores_in_meshes(cores: int) -> None:
  """Gives `pltpu.TensorCoreMesh` the TPU's core count under a CPU mesh.

  Its default `num_cores` reads the abstract device of the current mesh
  (`_get_default_num_cores`), which for a mesh of CPU devices (a test's
  `shard_map`) has no core count, where a TPU's has the TPU's. The function
  is the dataclass field's default factory, so its code is replaced in
  place (`cores` a default argument), keeping the function object.
  """
  try:
    from jax._src.pallas.mosaic import core as mosaic_core  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  f = getattr(mosaic_core, '_get_default_num_cores', None)
  if f is None or f.__code__.co_freevars:
    return
  real = types.FunctionType(f.__code__, f.__globals__, f.__name__)

  def default_num_cores(_cores=cores, _real=real):
    import jax  # pylint: disable=g-import-not-at-top,redefined-outer-name,reimported
    device = jax.sharding.get_abstract_mesh().abstract_device
    if device is not None and device.num_cores is None and (
        device.platform == 'cpu'):
      return _cores
    return _real()

  f.__code__ = default_num_cores.__code__
  f.__defaults__ = default_num_cores.__defaults__


def pytest_configure(config):
  del config  # Unused.
  if _ON_CHIP:
    return
  kind, _, cores = os.environ['JAX_FORK_COVERAGE_TPU'].rpartition(',')
  _see_tpu(kind, int(cores))


def _key_of_test(nodeid: str) -> str:
  """A test's file base name and its id in the file: the same test whatever
  directory pytest's node ids start from."""
  path, _, name = nodeid.partition('::')
  return os.path.basename(path) + '::' + name


def pytest_collection_modifyitems(config, items):
  path = os.environ.get('JAX_FORK_COVERAGE_EXCLUDE')
  only = os.environ.get('JAX_FORK_COVERAGE_ONLY')
  if not path and not only:
    return
  excluded = set()
  if path:
    with open(path, encoding='utf-8') as f:
      excluded = set(f.read().split('\n'))
  if only:
    with open(only, encoding='utf-8') as f:
      wanted = set(f.read().split('\n'))
    excluded |= {i.nodeid for i in items
                 if _key_of_test(i.nodeid) not in wanted}
  keep = [i for i in items if i.nodeid not in excluded]
  config.hook.pytest_deselected(
      items=[i for i in items if i.nodeid in excluded])
  items[:] = keep


def pytest_collectreport(report):
  if report.failed:
    _write({'nodeid': report.nodeid, 'when': 'collect', 'outcome': 'failed',
            'error': 'collection error',
            'message': str(report.longrepr)[-2000:], 'statements': []})


def pytest_runtest_logstart(nodeid, location):
  del location  # Unused.
  _write({'start': nodeid})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
  del item  # Unused.
  from jax.experimental.pallas import tpu as pltpu  # pylint: disable=g-import-not-at-top
  previous = signal.signal(signal.SIGALRM, _alarm)
  signal.setitimer(signal.ITIMER_REAL, _TIMEOUT)
  timed_out = False
  try:
    with (contextlib.nullcontext() if _ON_CHIP else
          pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())):
      outcome = yield
    timed_out = (outcome.excinfo is not None
                 and isinstance(outcome.excinfo[1], TimedOut))
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
  if not _ON_CHIP:
    _forget_failures(wait=not timed_out)


def _forget_failures(wait: bool) -> None:
  """Resets TPU interpret mode after a test, as upstream's interpreter tests do.

  A kernel that fails leaves its error in the interpreter's state (and in
  the ordered-effect tokens of its devices), and every later kernel of the
  process would fail with it: each test is measured on its own.

  The state is reset only once the test's computations have ended: a test
  may return while its kernel still runs (its outputs are not awaited), and
  a reset under a running kernel gives its devices different barriers to
  wait at, which hangs.

  Args:
    wait: Wait for the test's computations to end (not after a timeout,
      where one may never end) before the state is reset; a computation
      that failed, or was not awaited, has its tokens dropped.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from jax._src import dispatch  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas import tpu as pltpu  # pylint: disable=g-import-not-at-top
  drop_tokens = not wait
  if wait:
    try:
      jax.effects_barrier()
    except Exception:  # pylint: disable=broad-exception-caught
      drop_tokens = True
  pltpu.reset_tpu_interpret_mode_state()
  if drop_tokens:
    dispatch.runtime_tokens.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  report = (yield).get_result()
  record = {'nodeid': item.nodeid, 'when': call.when,
            'outcome': report.outcome, 'duration': call.duration}
  if report.skipped:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    record['message'] = reason.removeprefix('Skipped: ')
  elif report.failed and call.excinfo is not None:
    exc = call.excinfo.value
    message = str(exc)
    record['error'] = ('timeout' if call.excinfo.errisinstance(TimedOut)
                       else type(exc).__name__)
    record['message'] = (message if len(message) < 4000 else
                         message[:2000] + '\n...\n' + message[-2000:])
    record['statements'] = [
        str(entry.statement).strip() for entry in call.excinfo.traceback
        if str(entry.path) == str(item.path)]
    try:
      record['source'] = inspect.getsource(item.obj)
    except (AttributeError, OSError, TypeError):
      record['source'] = ''
  if call.when == 'call' or not report.passed:
    _write(record)
