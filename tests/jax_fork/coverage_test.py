"""Tests of python -m jax_fork coverage on a fake upstream tree.

The fake checkout holds two test files under tests/pallas whose tests pass,
skip, fail (twice for one cause), check the lowered kernel (hardware-only),
time out (the timeout is 15 s, so that interpreting the first kernel on a
busy machine does not time out), hang where the timeout's signal cannot
reach them, and kill the test process; the jax that runs them is this
Python's. No upstream mirror is needed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest
import jax

from jax_fork import coverage
from migration import manifest as manifest_lib

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

_MAIN_FILE = textwrap.dedent('''\
    import os
    import re
    import signal
    import time
    import unittest

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax._src import test_util as jtu
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu


    def add_one(x_ref, o_ref):
      o_ref[...] = x_ref[...] + 1


    class MosaicError(Exception):
      pass


    KERNEL_ENDS = []


    class FakeTest(unittest.TestCase):
      INTERPRET = False  # As upstream's PallasTPUTest.

      def test_a_sees_a_v6e(self):
        self.assertTrue(jtu.test_device_matches(["tpu"]))
        self.assertTrue(jtu.is_device_tpu(6, "e"))
        self.assertEqual(jtu.get_tpu_version(), 6)
        self.assertEqual(jax.devices()[0].num_cores, 1)
        self.assertEqual(pltpu.get_tpu_info().chip_version.value, "v6e")
        # Under a mesh of CPU devices too (a shard_map), as a TPU's would.
        cpu_mesh = jax.sharding.Mesh(jax.devices()[:1], ("x",))
        with jax.sharding.use_abstract_mesh(cpu_mesh.abstract_mesh):
          self.assertEqual(pltpu.TensorCoreMesh(axis_name="c").num_cores, 1)

      def test_b_interpreted(self):
        # Without interpret mode, Mosaic cannot lower this on CPU.
        x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
        out = pl.pallas_call(
            add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(x) + 1)

      def test_ba_kernel_fails(self):
        # Reads rows 8-15 of an (8, 128) input: the interpreter fails. Its
        # shared state is left behind, as jax 0.11's interpreter leaves it
        # ("the shared state must be reset before any further kernels are
        # interpreted", says reset_tpu_interpret_mode_state); jax 0.12's
        # clears it, so the test leaves a stand-in where it finds none.
        def kernel(x_ref, o_ref):
          o_ref[...] = x_ref[pl.ds(pl.program_id(0) + 8, 8), :]

        x = jnp.ones((8, 128), jnp.float32)
        try:
          pl.pallas_call(
              kernel, grid=(1,),
              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        finally:
          if interpret_pallas_call._shared_memory is None:
            interpret_pallas_call._shared_memory = "stale"

      def test_bb_after_a_failed_kernel(self):
        # The plugin has reset TPU interpret mode after the failed test.
        self.assertIsNone(interpret_pallas_call._shared_memory)
        self.test_b_interpreted()

      def test_bc_returns_before_its_kernel_ends(self):
        # A kernel on 4 devices whose output the test does not await, as in
        # upstream's test_pl_kernel_in_shmap_explicit_mesh. Resetting the
        # interpreter's state under it failed the kernel, or hung its devices
        # at their barrier.
        mesh = jax.make_mesh((4,), ("x",))
        spec = jax.sharding.PartitionSpec("x")
        block = pl.BlockSpec((8, 128), lambda i: (i, 0))

        def per_device(x):
          y = pl.pallas_call(
              add_one, grid=(64,), in_specs=[block], out_specs=block,
              out_shape=jax.ShapeDtypeStruct((64 * 8, 128), jnp.float32))(x)
          jax.debug.callback(lambda v: KERNEL_ENDS.append(float(v)),
                             y[-1, -1])
          return y

        f = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=spec,
                                  out_specs=spec, check_vma=False))
        f(jax.device_put(jnp.ones((4 * 64 * 8, 128), jnp.float32),
                         jax.sharding.NamedSharding(mesh, spec)))

      def test_bd_after_an_unawaited_kernel(self):
        # The plugin waited for the kernel to end on every device.
        self.assertEqual(KERNEL_ENDS, [2.0] * 4)

      def test_c_skips(self):
        self.skipTest("Needs a TPU v7")

      def test_d_checks_mosaic(self):
        x = jnp.ones((8, 128), jnp.float32)
        f = pl.pallas_call(
            add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
        self.assertIn("tpu_custom_call", jax.jit(f).lower(x).as_text())

      def test_da_expects_a_mosaic_error(self):
        # As upstream's tests of ops that a TPU generation lacks: the kernel
        # runs in interpret mode, and "MosaicError not raised".
        with self.assertRaises(MosaicError):
          pass

      def test_db_reads_compiled_text(self):
        # As upstream's test_two_input_vadd: a regex over the compiled text.
        x = jnp.ones((8, 128), jnp.float32)
        f = pl.pallas_call(
            add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
        compiled = jax.jit(f).lower(x).compile().as_text()
        self.assertGreater(
            int(re.search(r'"size":"(\\d+)"', compiled).group(1)), 0)

      def test_dc_lowers_for_a_tpu(self):
        # As upstream's test_cost_analysis_vmap_symbolic_batch_size.
        x = jnp.ones((8, 128), jnp.float32)
        f = pl.pallas_call(
            add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
        self.assertIn("tpu_custom_call", str(pl.lower_as_mlir(jax.jit(f), x)))

      def test_dd_reads_what_debug_prints(self):
        # As upstream's test_fori_loop_unroll_partial_divides.
        x = jnp.ones((8, 128), jnp.float32)
        f = pl.pallas_call(
            add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            debug=True)
        with jtu.capture_stdout() as get_output:
          f(x)
        self.assertIn("scf.for", get_output())

      def test_de_on_a_tpu_only(self):
        # As upstream's test_bool_dma_not_implemented and the tests that
        # only_passes_in_interpret wraps: it expects the TPU's error.
        if self.INTERPRET:
          self.skipTest("Test only applies to non-interpret mode.")
        with self.assertRaisesRegex(Exception, "DMAs with bool dtypes"):
          pass

      def test_e_gap(self):
        raise NotImplementedError("nan + dma_sem at 0x7f00aa 12")

      def test_f_gap(self):
        raise NotImplementedError("nan + dma_sem at 0x7f00bb 345")

      def test_g_wrong(self):
        np.testing.assert_allclose(np.float32(1), np.float32(2))

      def test_h_slow(self):
        time.sleep(120)

      def test_i_hangs(self):
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        time.sleep(600)

      def test_ia_crashes(self):
        os.abort()

      def test_j_after_the_hang(self):
        pass
''')

_OTHER_FILE = textwrap.dedent('''\
    import unittest


    class OtherTest(unittest.TestCase):

      def test_passes(self):
        pass
''')


_CHIP_FILE = textwrap.dedent('''\
    import unittest

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl


    class ChipTest(unittest.TestCase):

      def test_not_interpreted(self):
        # What the machine has (here a CPU), not a simulated TPU, and a
        # pallas_call compiled for it, not interpreted.
        self.assertEqual(jax.devices()[0].device_kind, 'cpu')
        def add_one(x_ref, o_ref):
          o_ref[...] = x_ref[...] + 1
        with self.assertRaisesRegex(Exception, 'interpret'):
          pl.pallas_call(
              add_one, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32),
          )(jnp.zeros((8,), jnp.float32))
''')


class ClassifyTest(absltest.TestCase):
  """The rules of `coverage.HARDWARE_ONLY` that the fake files do not reach,
  on records as the plugin writes them for upstream's tests."""

  def _failed(self, error, message, source, statements=()):
    return [{'nodeid': 't::T::test', 'when': 'call', 'outcome': 'failed',
             'error': error, 'message': message, 'source': source,
             'statements': list(statements)}]

  def test_pins_a_buffer(self):
    # tpu_pallas_state_test.py's PinnedBufferTest.test_basic.
    source = ('  def test_basic(self):\n    x_pinned = pin(x)\n'
              '    return unpin(x_pinned)\n')
    self.assertEqual(
        coverage.classify(self._failed(
            'TypeError', "No xla_shape_handler for type: <class "
            "'jax._src.state.types.AbstractLinVal'>", source)),
        ('hardware-only',
         "pins a buffer with XLA:TPU's Pin and Unpin custom calls"))
    # With #55 the interpreter says so itself.
    self.assertEqual(
        coverage.classify(self._failed(
            'NotImplementedError', "Input 0 of the pallas_call (the "
            "kernel's `x_ref`) is a pinned buffer (`pin`): pinned buffers "
            'are not supported in TPU interpret mode.', source))[0],
        'hardware-only')
    # Another TypeError of the same test is a gap.
    self.assertEqual(
        coverage.classify(self._failed('TypeError', 'bad operand', source)),
        ('failed', 'TypeError: bad operand'))

  def test_lowers_an_int32_array_in_semaphore_memory(self):
    # tpu_pallas_state_test.py's
    # CoreMapTest.test_kernel_with_output_memory_space_SEMAPHORE.
    message = ('Operand out0 of dtype int32 in SEMAPHORE memory in TPU '
               'interpret mode (only semaphore-typed arrays are supported '
               'there).')
    self.assertEqual(
        coverage.classify(self._failed(
            'NotImplementedError', message,
            '    text = jax.jit(f).lower(x).as_text()\n')),
        ('hardware-only', 'lowers a kernel that the TPU does not compile (an '
         'int32 array in SEMAPHORE memory)'))
    # Where the test runs the kernel instead, the refusal is a gap.
    self.assertEqual(
        coverage.classify(self._failed('NotImplementedError', message,
                                       '    y = f(x)\n'))[0], 'failed')


class CoverageTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    # The tool measures upstream checkouts (jax 0.11 and newer: its plugin
    # uses jax._src.tpu_info); it does not depend on the release tested.
    newest = manifest_lib.load(
        os.path.join(_ROOT, 'patches')).served_versions()[-1]
    if os.environ.get('JAX_INTERPRET_PATCHES_TEST_VERSION', newest) != newest:
      raise absltest.SkipTest('runs once, with the newest jax release')
    cls.repo = tempfile.mkdtemp(prefix='coverage-test-')
    cls.addClassCleanup(shutil.rmtree, cls.repo)
    os.makedirs(os.path.join(cls.repo, 'tests', 'pallas'))
    for name, text in (('tpu_fake_test.py', _MAIN_FILE),
                       ('tpu_other_test.py', _OTHER_FILE),
                       ('tpu_chip_test.py', _CHIP_FILE)):
      with open(os.path.join(cls.repo, 'tests', 'pallas', name), 'w',
                encoding='utf-8') as f:
        f.write(text)
    cls.outcomes = coverage.run(
        cls.repo, sys.executable, 'v6e',
        ('tpu_fake_test.py', 'tests/pallas/tpu_other_test.py'), timeout=15,
        grace=3)

  def test_each_outcome(self):
    got = {o.test.rpartition('::')[2]: (o.status, o.cause)
           for o in self.outcomes}
    self.assertEqual(got, {
        'test_a_sees_a_v6e': ('passed', ''),
        'test_b_interpreted': ('passed', ''),
        'test_ba_kernel_fails': (
            'failed', 'JaxRuntimeError in a callback: IndexError: '
            'Out-of-bounds read of x_ref (vmem buffer N of device N, core N) '
            'at tpu_fake_test.py:N:N '),
        'test_bb_after_a_failed_kernel': ('passed', ''),
        'test_bc_returns_before_its_kernel_ends': ('passed', ''),
        'test_bd_after_an_unawaited_kernel': ('passed', ''),
        'test_c_skips': ('skipped', 'Needs a TPU v7'),
        'test_d_checks_mosaic': ('hardware-only',
                                 'checks the lowered or compiled kernel'),
        'test_da_expects_a_mosaic_error': (
            'hardware-only', 'expects a Mosaic compile error'),
        'test_db_reads_compiled_text': (
            'hardware-only', 'reads the compiled kernel'),
        'test_dc_lowers_for_a_tpu': ('hardware-only', 'lowers for a TPU'),
        'test_dd_reads_what_debug_prints': (
            'hardware-only', 'reads the Mosaic kernel that debug=True prints'),
        'test_de_on_a_tpu_only': (
            'hardware-only',
            "expects the TPU's error (its source checks self.INTERPRET)"),
        'test_e_gap': ('failed', 'NotImplementedError: nan + dma_sem at '
                                 '<address> N'),
        'test_f_gap': ('failed', 'NotImplementedError: nan + dma_sem at '
                                 '<address> N'),
        'test_g_wrong': ('failed', 'AssertionError: Not equal to tolerance '
                                   'rtol=Ne-N, atol=N'),
        'test_h_slow': ('timed out', 'the test ran longer than 15 s'),
        'test_i_hangs': ('timed out', 'hang: killed after 18 s'),
        'test_ia_crashes': (
            'failed', 'crashed: the test process died (signal SIGABRT)'),
        'test_j_after_the_hang': ('passed', ''),
        'test_passes': ('passed', ''),
    })

  def test_tables(self):
    self.assertEqual(coverage.file_rows(self.outcomes), [
        {'file': 'tests/pallas/tpu_fake_test.py', 'total': 20, 'passed': 6,
         'skipped': 1, 'hardware-only': 6, 'failed': 5, 'timed out': 2,
         'pass_rate': 46.2},
        {'file': 'tests/pallas/tpu_other_test.py', 'total': 1, 'passed': 1,
         'skipped': 0, 'hardware-only': 0, 'failed': 0, 'timed out': 0,
         'pass_rate': 100.0}])
    causes = coverage.cause_rows(self.outcomes)
    self.assertEqual(causes[0], {
        'status': 'failed', 'tests': 2, 'files': ['tpu_fake_test.py'],
        'cause': 'NotImplementedError: nan + dma_sem at <address> N',
        'example': 'tests/pallas/tpu_fake_test.py::FakeTest::test_e_gap'})
    self.assertLen(causes, 12)
    text = coverage.table_text(self.outcomes).splitlines()
    self.assertEqual(text[:4], [
        'file               total  passed  skipped  hw-only  failed  '
        'timed out  pass rate',
        'tpu_fake_test.py      20       6        1        6       5  '
        '        2      46.2%',
        'tpu_other_test.py      1       1        0        0       0  '
        '        0     100.0%',
        'total                 21       7        1        6       5  '
        '        2      50.0%'])
    self.assertIn('    2  failed         NotImplementedError: nan + dma_sem '
                  'at <address> N (tpu_fake_test.py)', text)

  def test_command(self):
    env = dict(os.environ, PYTHONPATH=_ROOT)
    proc = subprocess.run(
        [sys.executable, '-m', 'jax_fork', 'coverage', '--json',
         f'--jax-repo={self.repo}', '--files=tpu_other_test.py', '--tpu=v5p'],
        cwd=_ROOT, env=env, capture_output=True, text=True, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    report = json.loads(proc.stdout)
    self.assertEqual((report['tpu'], report['jax_commit']), ('v5p', None))
    self.assertEqual(report['tests'], [{
        'file': 'tests/pallas/tpu_other_test.py',
        'test': 'tests/pallas/tpu_other_test.py::OtherTest::test_passes',
        'status': 'passed', 'cause': '', 'seconds': report['tests'][0][
            'seconds']}])

  def test_on_the_chip(self):
    # --tpu chip runs the tests on the machine's own device (here the CPU),
    # neither simulating a TPU nor interpreting, and says which it was.
    outcomes = coverage.run(self.repo, sys.executable, coverage.CHIP,
                            ('tpu_chip_test.py',), timeout=60)
    self.assertEqual([(o.test.rpartition('::')[2], o.status, o.cause)
                      for o in outcomes],
                     [('test_not_interpreted', 'passed', '')])
    info = coverage.device_info(sys.executable, self.repo)
    self.assertEqual(info, {'jax_version': jax.__version__,
                            'device_kind': 'cpu'})

  def test_against_a_chip_run(self):
    other = 'tests/pallas/tpu_other_test.py'
    chip = {'device_kind': 'TPU v5 lite', 'jax_version': '0.10.2', 'tests': [
        # Node ids from a run whose pytest root was above the checkout.
        {'file': other, 'test': f'jax/{other}::OtherTest::test_passes',
         'status': 'passed'},
        {'file': other, 'test': f'{other}::OtherTest::test_not_here',
         'status': 'passed'},
        {'file': other, 'test': f'{other}::OtherTest::test_failed_there',
         'status': 'failed'}]}
    path = os.path.join(self.repo, 'chip.json')
    with open(path, 'w', encoding='utf-8') as f:
      json.dump(chip, f)
    proc = subprocess.run(
        [sys.executable, '-m', 'jax_fork', 'coverage', '--json',
         f'--jax-repo={self.repo}', '--files=tpu_other_test.py',
         f'--against={path}'],
        cwd=_ROOT, env=dict(os.environ, PYTHONPATH=_ROOT),
        capture_output=True, text=True, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertEqual(json.loads(proc.stdout)['against'], [
        {'file': 'tpu_other_test.py', 'passed_on_chip': 2, 'passed': 1,
         'not_run': 1, 'tests': []}])
    # Tests that passed on the chip and fail here are listed with why.
    failing = [coverage.Outcome(f'{other}', f'{other}::OtherTest::'
                                'test_passes', 'failed', 'E: x')]
    rows = coverage.against(failing, chip)
    self.assertEqual(rows[0]['tests'], [
        {'test': f'{other}::OtherTest::test_passes', 'status': 'failed',
         'cause': 'E: x'}])
    self.assertEqual(coverage.against_text(rows, chip).splitlines(), [
        'Against the TPU run of TPU v5 lite (jax 0.10.2): of the tests that '
        'passed there,',
        'tpu_other_test.py: 0 of 2 pass here (1 not run here)',
        f'  failed: {other}::OtherTest::test_passes: E: x'])

  def test_only_the_chosen_tests(self):
    # `only` (what --against passes: the tests that passed on the chip, as
    # file base name and id) deselects the others; a file with none of
    # them is not run.
    chip = {'tests': [
        {'file': 'tests/pallas/tpu_fake_test.py', 'status': 'passed',
         'test': 'jax/tests/pallas/tpu_fake_test.py::FakeTest::test_c_skips'},
        {'file': 'tests/pallas/tpu_fake_test.py', 'status': 'failed',
         'test': 'tests/pallas/tpu_fake_test.py::FakeTest::test_passes'}]}
    only = coverage.chip_passed(chip)
    self.assertEqual(only, {'tpu_fake_test.py::FakeTest::test_c_skips'})
    outcomes = coverage.run(
        self.repo, sys.executable, 'v6e',
        ('tpu_fake_test.py', 'tpu_other_test.py'), timeout=15, grace=3,
        only=only)
    self.assertEqual([(o.test, o.status) for o in outcomes], [
        ('tests/pallas/tpu_fake_test.py::FakeTest::test_c_skips',
         'skipped')])

  def test_jax_commit_says_modified(self):
    repo = tempfile.mkdtemp(prefix='coverage-git-')
    self.addCleanup(shutil.rmtree, repo)
    path = os.path.join(repo, 'f.py')
    with open(path, 'w', encoding='utf-8') as f:
      f.write('x = 1\n')
    git = ['git', '-C', repo, '-c', 'user.name=t', '-c', 'user.email=t@t']
    for args in (['init', '-q'], ['add', 'f.py'], ['commit', '-qm', 'f']):
      subprocess.run(git + args, check=True)
    head = subprocess.run(git + ['rev-parse', 'HEAD'], check=True,
                          capture_output=True, text=True).stdout.strip()
    self.assertEqual(coverage.jax_commit(repo), head)
    with open(path, 'w', encoding='utf-8') as f:
      f.write('x = 2\n')
    self.assertEqual(coverage.jax_commit(repo), head + '+modified')
    # A folder inside the repository is not a checkout of its own.
    os.makedirs(os.path.join(repo, 'jax-0.10.2'))
    self.assertIsNone(coverage.jax_commit(os.path.join(repo, 'jax-0.10.2')))

  def test_usage_and_environment_errors(self):
    for args, message in (
        ([], 'coverage needs --jax_repo PATH.'),
        ([f'--jax_repo={self.repo}', '--files=tpu_none_test.py'],
         'No tests/pallas/tpu_none_test.py in the jax checkout'),
        ([f'--jax_repo={self.repo}', '--tpu=v9'], 'value should be one of'),
        ([f'--jax_repo={self.repo}', '--against=/nonexistent.json'],
         'is not the --json report of a coverage run'),
        ([f'--jax_repo={self.repo}', '--files=tpu_other_test.py',
          '--test_python=/nonexistent/python'],
         'No Python /nonexistent/python to run the tests.')):
      proc = subprocess.run(
          [sys.executable, '-m', 'jax_fork', 'coverage', *args], cwd=_ROOT,
          env=dict(os.environ, PYTHONPATH=_ROOT), capture_output=True,
          text=True, check=False)
      code = 5 if 'test_python' in ' '.join(args) else 2
      self.assertEqual(proc.returncode, code, proc.stderr)
      self.assertIn(message, proc.stderr)


if __name__ == '__main__':
  absltest.main()
