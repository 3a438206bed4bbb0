"""Tests of the split between the users' `migration` and the maintainers'
`jax_fork`: what each CLI offers, and what `migration` imports."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

from absl.testing import absltest

try:
  import tomllib
except ModuleNotFoundError:  # Python 3.10
  import tomli as tomllib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# Written out here, not read from the CLIs: the issue that split them.
USER_COMMANDS = ['status', 'check', 'apply', 'revert', 'wheel']
# The maintainers' commands that python -m migration had before interpret.2,
# and python -m jax_fork's (those and the new ones).
MOVED_COMMANDS = ['fork', 'refresh', 'carry', 'drift', 'port', 'manifest',
                  'export-upstream']
MAINTAINER_COMMANDS = MOVED_COMMANDS + ['coverage']


def _run(*args: str) -> subprocess.CompletedProcess[str]:
  return subprocess.run(
      [sys.executable, *args], cwd=REPO, capture_output=True, text=True,
      env=dict(os.environ, PYTHONPATH=REPO), check=False)


def _commands(usage: str) -> list[str]:
  """The command names of a --help text's `Commands:` section."""
  lines = usage.split('\nCommands:\n', 1)[1].split('\n\n', 1)[0]
  return [line.split()[0] for line in lines.splitlines()
          if line.startswith('  ') and not line.startswith('   ')]


class LayoutTest(absltest.TestCase):

  def test_migration_source_never_imports_jax_fork(self):
    directory = os.path.join(REPO, 'migration')
    files = sorted(f for f in os.listdir(directory) if f.endswith('.py'))
    self.assertIn('cli.py', files)
    for name in files:
      with open(os.path.join(directory, name), encoding='utf-8') as f:
        tree = ast.parse(f.read(), name)
      for node in ast.walk(tree):  # Imports inside functions too.
        if isinstance(node, ast.Import):
          modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
          modules = [node.module or '']
        else:
          continue
        for module in modules:
          self.assertNotEqual(module.split('.')[0], 'jax_fork',
                              f'{name}:{node.lineno} imports {module}')

  def test_importing_migration_loads_no_jax_fork_nor_what_status_skips(self):
    directory = os.path.join(REPO, 'migration')
    modules = sorted(f'migration.{f[:-3]}' for f in os.listdir(directory)
                     if f.endswith('.py') and f != '__main__.py')
    # migration.cli alone, as `python -m migration status` loads it: not
    # the modules of the other commands (filelock is apply's and revert's).
    lazy = ['migration.check', 'migration.compat', 'migration.transaction',
            'migration.wheelbuild', 'filelock']
    proc = _run('-c', 'import sys; import migration.cli; '
                f'print([m for m in {lazy!r} if m in sys.modules]); '
                f'import {", ".join(modules)}; '
                'print(sorted(m for m in sys.modules if m == "jax_fork" or '
                'm.startswith("jax_fork.")))')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertEqual(proc.stdout.splitlines(), ['[]', '[]'])

  def test_each_cli_lists_its_own_commands(self):
    proc = _run('-m', 'migration', '--help')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertEqual(_commands(proc.stdout), USER_COMMANDS)
    for flag in ('--onto', '--jax_repo', '--update', '--serve'):
      self.assertNotIn(flag, proc.stdout)
    proc = _run('-m', 'jax_fork', '--help')
    self.assertEqual(proc.returncode, 0, proc.stderr)
    self.assertEqual(_commands(proc.stdout), MAINTAINER_COMMANDS)
    self.assertIn('Usage: python -m jax_fork COMMAND', proc.stdout)
    for flag in ('--onto', '--jax_repo', '--update', '--serve', '--json',
                 '--patches_dir', '--wheel_dir', '--all'):
      self.assertIn(flag, proc.stdout)
    self.assertNotIn('--dry_run', proc.stdout)

  def test_old_maintainer_spellings_exit_2_naming_the_new_command(self):
    for command in MOVED_COMMANDS:
      # With a flag only python -m jax_fork defines, and with --json.
      for extra in (['--onto=jax-0.7.2', '--update'], ['--json']):
        proc = _run('-m', 'migration', command, *extra)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn(f'Run python -m jax_fork {command} ', proc.stderr)
        self.assertNotIn('Traceback', proc.stderr)
    proc = _run('-m', 'jax_fork', 'status')
    self.assertEqual(proc.returncode, 2, proc.stderr)
    self.assertIn('Expected one command out of fork, refresh', proc.stderr)

  def test_package_ships_migration_and_patches_but_not_jax_fork(self):
    with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
      setuptools = tomllib.load(f)['tool']['setuptools']
    self.assertEqual(setuptools['packages'],
                     ['migration', 'migration.patches'])

  def test_package_version_is_the_release(self):
    # `pip install .` installs the tool as the release its wheels carry
    # (jax-V+interpret.N).
    with open(os.path.join(REPO, 'pyproject.toml'), 'rb') as f:
      version = tomllib.load(f)['project']['version']
    with open(os.path.join(REPO, 'patches', 'manifest.json'), 'rb') as f:
      release = json.load(f)['release']
    self.assertEqual(version, str(release))


if __name__ == '__main__':
  absltest.main()
