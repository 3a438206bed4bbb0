"""Export each feature as one squashed commit for an upstream pull request.

Upstream jax asks for one commit per pull request. A feature here is one or
more patches of a series plus the test files that cover them. For each
feature, in order, on a scratch worktree of the given jax checkout (the
checkout itself is never touched), the export

1. applies the feature's patches exactly (``git apply``, no fuzz), or, if
   no series applies exactly to the checkout, rebases them onto it with a
   three-way merge (``git merge-file``) from the released files the series
   was made against; any conflict stops the export;
2. adds its test files to ``tests/pallas/``, with the shared test helper
   inlined (upstream's interpret tests are self-contained files) and the
   code kept for older jax releases left out (``for_jax_head``), and a
   ``jax_multiplatform_test`` target per file to ``tests/pallas/BUILD``;
3. adds an entry to the unreleased section of ``docs/pallas/CHANGELOG.md``;
4. commits with a message for reviewers and writes it with
   ``git format-patch``, ready for ``git am --keep-non-patch`` (which keeps
   the ``[pallas:tpu]`` tag of the subject).

Nothing is pushed or submitted: a person reviews and submits.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import zipfile

from absl import logging

from migration import errors
from migration import gitapply
from migration import manifest as manifest_lib
from migration import wheels

TEST_DIR = os.path.join('tests', 'pallas')
HELPER = 'tpu_interpret_test_util'
BUILD = os.path.join(TEST_DIR, 'BUILD')
CHANGELOG = os.path.join('docs', 'pallas', 'CHANGELOG.md')
CHANGELOG_SECTION = '### Mosaic TPU interpret mode'

# The tests also run on older jax releases. The code that only those need is
# fenced by these comment lines in the helper and the tests; inside a fence,
# a comment `# At jax HEAD: <code>` gives the code that replaces the fence.
OLDER_RELEASES_BEGIN = '# Older jax releases: begin.'
OLDER_RELEASES_END = '# Older jax releases: end.'
AT_HEAD = '# At jax HEAD: '
# Uses of the helper's shims for older releases, and their HEAD equivalents
# (the inlined helper imports `mosaic_interpret` itself).
HEAD_EQUIVALENTS = {
    'test_util.kernel(': 'pl.kernel(',
    'test_util.reset_after_failure()':
        'pltpu.reset_tpu_interpret_mode_state()',
    f'from {HELPER} import mosaic_interpret\n': '',
}

# Why reviewers should take interpret-mode support that the compiler lacks.
REVIEWER_NOTE = """\
Note for reviewers: Mosaic TPU lowering still rejects this, so TPU interpret
mode now accepts kernels that the TPU compiler refuses. That is still useful:
interpret mode is where kernels are written and debugged on CPU, the
semantics follow the public docstrings (and Mosaic GPU, which implements
them on hardware), and a kernel that works in interpret mode is ready for
the day the compiler catches up."""


@dataclasses.dataclass(frozen=True)
class Feature:
  """One pull request: patches of a series and the tests that cover them."""
  key: str
  title: str
  patch_prefixes: tuple[str, ...]
  tests: tuple[str, ...]
  changelog: str
  # Ends the commit message.
  reviewer_note: str = REVIEWER_NOTE


FEATURES = (
    Feature(
        key='nondecrementing-wait',
        title='[pallas:tpu] Support non-decrementing semaphore waits and '
        'pl.semaphore_read in TPU interpret mode.',
        patch_prefixes=('0001', '0002', '0003'),
        tests=('tpu_pallas_interpret_semaphore_test.py',
               'tpu_pallas_interpret_semaphore_distributed_test.py'),
        changelog=(
            'TPU interpret mode supports '
            '{func}`jax.experimental.pallas.semaphore_wait` with '
            '``decrement=False`` and {func}`jax.experimental.pallas.'
            'semaphore_read`, and {func}`jax.experimental.pallas.'
            'semaphore_signal` without ``core_index`` now signals the calling '
            'core instead of core 0.'),
    ),
    Feature(
        key='collective-run-scoped',
        title='[pallas:tpu] Support run_scoped with collective_axes in TPU '
        'interpret mode.',
        patch_prefixes=('0004',),
        tests=('tpu_pallas_interpret_collective_test.py',
               'tpu_pallas_interpret_collective_distributed_test.py'),
        changelog=(
            'TPU interpret mode supports '
            '{func}`jax.experimental.pallas.run_scoped` with '
            '``collective_axes`` over the core axis of a '
            '{class}`jax.experimental.pallas.tpu.TensorCoreMesh`.'),
    ),
    Feature(
        key='deadlock-detection',
        title='[pallas:tpu] Detect deadlocks in TPU interpret mode.',
        patch_prefixes=('0005',),
        tests=('tpu_pallas_interpret_deadlock_test.py',
               'tpu_pallas_interpret_deadlock_distributed_test.py'),
        changelog=(
            'TPU interpret mode raises an error, instead of hanging, when no '
            'core can make progress; '
            '``InterpretParams(detect_deadlocks=False)`` turns this off.'),
    ),
    Feature(
        key='sparsecore',
        title='[pallas:tpu] Run every subcore of a SparseCore mesh in TPU '
        'interpret mode.',
        patch_prefixes=('0006',),
        tests=('tpu_pallas_interpret_sparsecore_test.py',),
        changelog=(
            'TPU interpret mode runs every core and subcore of a '
            '{class}`jax.experimental.pallas.tpu_sc.VectorSubcoreMesh` or '
            '{class}`jax.experimental.pallas.tpu_sc.ScalarSubcoreMesh`, with '
            '``VMEM_SHARED`` shared by the subcores of a SparseCore, and '
            'supports {func}`jax.experimental.pallas.tpu_sc.subcore_barrier`, '
            '{func}`jax.experimental.pallas.tpu_sc.load_gather`, '
            '{func}`jax.experimental.pallas.tpu_sc.store_scatter`, '
            '{func}`jax.experimental.pallas.tpu_sc.parallel_loop`, masked '
            'loads and ``collective_axes`` over the subcore axis.'),
        reviewer_note=(
            'Note for reviewers: apart from `collective_axes` (behind\n'
            '`allow_collective_axes_in_run_scoped`, as on a TensorCoreMesh),\n'
            'this makes interpret mode do what SparseCore hardware does; it\n'
            'ran only one subcore before.'),
    ),
)

_BUILD_TARGET = '''
jax_multiplatform_test(
    name = "{name}",
    srcs = [
        "{name}.py",
    ],
    enable_backends = ["cpu"],
    tags = [
        "nomsan",
        "notsan",
    ],
    deps = [
        "//jax/experimental:pallas",
        "//jax/experimental:pallas_tpu",
    ] + py_deps([
        "absl/testing",
        "numpy",
    ]),
)
'''


def _git(args: list[str], cwd: str) -> str:
  proc = subprocess.run([gitapply.git_executable(), *args], cwd=cwd,
                        capture_output=True, text=True, check=False)
  if proc.returncode:
    raise errors.EnvironmentProblem(
        f'git {" ".join(args)} failed in {cwd}:\n{proc.stderr.strip()}')
  return proc.stdout


def checkout_version(jax_repo: str) -> str | None:
  """Returns the jax version of a checkout, from ``jax/version.py``."""
  try:
    with open(os.path.join(jax_repo, 'jax', 'version.py'),
              encoding='utf-8') as f:
      match = re.search(r'^_version\s*=\s*"([^"]+)"', f.read(), re.M)
  except OSError:
    return None
  return match.group(1) if match else None


def choose_series(manifest: manifest_lib.Manifest, jax_repo: str,
                  name: str | None = None) -> manifest_lib.Series:
  """Returns the series whose patches all apply exactly to the checkout.

  Args:
    manifest: the loaded manifest.
    jax_repo: the upstream jax checkout.
    name: a series name to use instead of choosing one.

  Raises:
    UsageError: ``name`` is not a series of the manifest.
    ConflictError: no series applies exactly; names, per series, the first
      patch that does not apply and git's message.
  """
  if name is not None:
    if name not in manifest.series:
      raise errors.UsageError(
          f'Unknown series {name}; known: {", ".join(manifest.series)}.')
    candidates = [manifest.series[name]]
  else:
    version = checkout_version(jax_repo)
    served = manifest.series_for(version) if version else None
    candidates = ([served] if served else []) + [
        s for s in manifest.series.values() if s is not served]
  problems = []
  for series in candidates:
    with tempfile.TemporaryDirectory(prefix='export-check-') as tmp:
      for f in series.files:
        src = os.path.join(jax_repo, f)
        if os.path.exists(src):
          os.makedirs(os.path.dirname(os.path.join(tmp, f)), exist_ok=True)
          shutil.copyfile(src, os.path.join(tmp, f))
      for patch in series.patches:
        ok, output = gitapply.try_apply(patch.path, tmp, check_only=False)
        if not ok:
          problems.append(f'{series.name}: {patch.name} does not apply:\n'
                          f'{output}')
          break
      else:
        return series
  raise errors.ConflictError(
      f'No series applies exactly to {jax_repo} (jax '
      f'{checkout_version(jax_repo)}); rebase the series onto it first.\n'
      + '\n'.join(problems))


def nearest_series(manifest: manifest_lib.Manifest,
                   version: str | None) -> manifest_lib.Series:
  """Returns the series made against the release nearest to `version`.

  That is the series serving the oldest release at or after `version` (a
  development checkout precedes its release), else the newest series.
  """
  def newest(s: manifest_lib.Series) -> tuple:
    return max(manifest_lib.version_key(v) for v in s.hashes)

  if version is not None:
    key = manifest_lib.version_key(version)
    later = [s for s in manifest.series.values() if newest(s) >= key]
    if later:
      return min(later, key=newest)
  return max(manifest.series.values(), key=newest)


def feature_states(series: manifest_lib.Series,
                   wheel_dirs: tuple[str, ...] = ()) -> list[dict[str, str]]:
  """Returns the touched files before the first feature and after each one.

  The files come from the released wheel of the newest version the series
  serves, with the series applied feature by feature.

  Args:
    series: the series.
    wheel_dirs: directories searched for the wheel before the cache.

  Returns:
    ``states[0]`` is the released files, ``states[k]`` the files after the
    first ``k`` features; each maps a path to its text.

  Raises:
    PatchDataError: the series does not apply to its own release.
  """
  version = max(series.hashes, key=manifest_lib.version_key)
  wheel = wheels.pristine_wheel(version, wheel_dirs)
  with tempfile.TemporaryDirectory(prefix='export-states-') as tmp:
    with zipfile.ZipFile(wheel) as zf:
      for f in series.files:
        zf.extract(f, tmp)

    def snapshot() -> dict[str, str]:
      out = {}
      for f in series.files:
        with open(os.path.join(tmp, f), encoding='utf-8') as fh:
          out[f] = fh.read()
      return out

    states = [snapshot()]
    for feature in FEATURES:
      for patch in series.patches:
        if patch.name.startswith(feature.patch_prefixes):
          ok, output = gitapply.try_apply(patch.path, tmp, check_only=False)
          if not ok:
            raise errors.PatchDataError(
                f'{patch.name} does not apply to jax {version}:\n{output}')
      states.append(snapshot())
  return states


def merge_feature(worktree: str, before: dict[str, str],
                  after: dict[str, str], feature: Feature) -> None:
  """Rebases one feature onto the worktree with ``git merge-file``.

  Raises:
    ConflictError: a file does not merge cleanly; names the file.
  """
  with tempfile.TemporaryDirectory(prefix='export-merge-') as tmp:
    for f in after:
      if before[f] == after[f]:
        continue
      paths = {}
      for name, text in (('base', before[f]), ('theirs', after[f])):
        paths[name] = os.path.join(tmp, name)
        with open(paths[name], 'w', encoding='utf-8') as fh:
          fh.write(text)
      proc = subprocess.run(
          [gitapply.git_executable(), 'merge-file', '-p', '-q',
           os.path.join(worktree, f), paths['base'], paths['theirs']],
          capture_output=True, text=True, check=False)
      if proc.returncode:
        raise errors.ConflictError(
            f'Feature {feature.key}: {f} does not merge cleanly onto the '
            f'checkout ({proc.returncode} conflict(s)); rebase the series '
            'onto it by hand (python -m migration fork).')
      with open(os.path.join(worktree, f), 'w', encoding='utf-8') as fh:
        fh.write(proc.stdout)


def for_jax_head(source: str) -> str:
  """Returns a test or helper source without its code for older releases.

  Each fence from ``OLDER_RELEASES_BEGIN`` to ``OLDER_RELEASES_END`` is
  replaced by its ``# At jax HEAD: <code>`` lines as code, at their
  indentation, and the uses of shims in ``HEAD_EQUIVALENTS`` by their HEAD
  equivalents.

  Raises:
    PatchDataError: a fence is not closed.
  """
  out = []
  fenced = False
  for line in source.splitlines(keepends=True):
    stripped = line.strip()
    if stripped == OLDER_RELEASES_BEGIN:
      fenced = True
    elif stripped == OLDER_RELEASES_END:
      fenced = False
    elif not fenced:
      out.append(line)
    elif stripped.startswith(AT_HEAD):
      indent = line[:len(line) - len(line.lstrip())]
      out.append(indent + stripped[len(AT_HEAD):] + '\n')
  if fenced:
    raise errors.PatchDataError(
        f'{OLDER_RELEASES_BEGIN!r} without {OLDER_RELEASES_END!r}.')
  text = ''.join(out)
  for shim, head in HEAD_EQUIVALENTS.items():
    text = text.replace(shim, head)
  return text


def inline_helper(test_source: str, helper_source: str) -> str:
  """Returns a test file with the shared helper module inlined.

  The helper's standard-library imports join the test's first import block
  (kept sorted), its other imports replace the test's import of the helper,
  its definitions go before the test's first definition, and ``test_util.``
  prefixes are dropped.

  Args:
    test_source: a test file that does ``import tpu_interpret_test_util as
      test_util``.
    helper_source: the helper module.
  """
  import_line = f'import {HELPER} as test_util\n'
  if import_line not in test_source:
    return test_source
  helper_lines = helper_source.splitlines(keepends=True)
  last_import = max(i for i, l in enumerate(helper_lines)
                    if l.startswith(('import ', 'from ')))
  helper_imports = [l for l in helper_lines[:last_import + 1]
                    if l.startswith(('import ', 'from '))
                    and not l.startswith('from __future__')]
  definitions = ''.join(helper_lines[last_import + 1:]).strip() + '\n\n\n'
  test_lines = set(test_source.splitlines(keepends=True))
  new_imports = [l for l in helper_imports if l not in test_lines]
  stdlib = [l for l in new_imports if _is_stdlib_import(l)]
  other = [l for l in new_imports if not _is_stdlib_import(l)]
  out = _merge_imports(test_source, import_line, other)
  block = re.search(r'^((?:import |from )[^\n]*\n)+', out, re.M)
  assert block is not None
  if stdlib and all(_is_stdlib_import(l)
                    for l in block.group(0).splitlines(keepends=True)):
    merged = sorted(set(block.group(0).splitlines(keepends=True)) |
                    set(stdlib), key=lambda l: l.split()[1])
    out = out[:block.start()] + ''.join(merged) + out[block.end():]
  elif stdlib:
    out = (out[:block.start()] + ''.join(sorted(stdlib)) + '\n'
           + out[block.start():])
  anchor = re.search(r'^(# TODO\(jburnim\)|@jtu\.|class |def )', out, re.M)
  assert anchor is not None
  out = out[:anchor.start()] + definitions + out[anchor.start():]
  return out.replace('test_util.', '')


def _merge_imports(source: str, replaced: str, lines: list[str]) -> str:
  """Replaces the import line `replaced` with `lines`, keeping its block sorted.

  Imports sort by module name, as in upstream's files.
  """
  start = source.index(replaced)
  block_start = source.rfind('\n\n', 0, start) + 2
  block_end = source.find('\n\n', start) + 1
  block = source[block_start:block_end].splitlines(keepends=True)
  block.remove(replaced)
  merged = sorted(block + lines, key=lambda l: l.split()[1])
  return source[:block_start] + ''.join(merged) + source[block_end:]


def _is_stdlib_import(line: str) -> bool:
  return line.split()[1].split('.')[0] not in ('jax', 'absl', 'numpy')


def add_build_targets(build: str, names: list[str]) -> str:
  """Returns ``tests/pallas/BUILD`` with a test target per name added.

  The targets follow upstream's ``tpu_pallas_interpret_distributed_test``
  and go right after it (at the end if it is missing).
  """
  targets = ''.join(_BUILD_TARGET.format(name=n) for n in names
                    if f'name = "{n}"' not in build)
  match = re.search(
      r'^jax_multiplatform_test\(\n    name = '
      r'"tpu_pallas_interpret_distributed_test",\n.*?^\)\n', build,
      re.M | re.S)
  if match is None:
    return build.rstrip('\n') + '\n' + targets
  return build[:match.end()] + targets + build[match.end():]


def add_changelog_entry(changelog: str, entry: str) -> str:
  """Returns the changelog with ``entry`` in its unreleased section.

  Raises:
    PatchDataError: the changelog has no ``## Unreleased`` section.
  """
  start = changelog.find('\n## Unreleased\n')
  if start < 0:
    raise errors.PatchDataError(f'{CHANGELOG} has no "## Unreleased" section.')
  end = changelog.find('\n## ', start + 1)
  end = len(changelog) if end < 0 else end + 1
  section = changelog[start:end]
  item = textwrap.fill(entry, width=80, initial_indent='  * ',
                       subsequent_indent='    ', break_long_words=False,
                       break_on_hyphens=False) + '\n'
  if CHANGELOG_SECTION in section:
    section = section.rstrip('\n') + '\n' + item + '\n'
  else:
    section = (section.rstrip('\n') + f'\n\n{CHANGELOG_SECTION}\n\n'
               f'* New features\n\n{item}\n')
  return changelog[:start] + section + changelog[end:]


def commit_message(feature: Feature, patches: list[manifest_lib.Patch]) -> str:
  """Returns the commit message: the patches' explanations and a note."""
  bodies = []
  for patch in patches:
    with open(patch.path, encoding='utf-8') as f:
      text = f.read()
    body = text.split('\n\n', 1)[1].split('\n---\n', 1)[0]
    # The DEP-3 fields are ours, not upstream's.
    body = re.split(r'\n\nDescription: ', '\n\n' + body.strip(), 1)[0].strip()
    if len(patches) > 1:
      body = f'{patch.subject}\n\n{body}'
    bodies.append(body)
  tests = ''.join(f'\n- tests/pallas/{t}' for t in feature.tests)
  return (f'{feature.title}\n\n' + '\n\n'.join(bodies)
          + f'\n\nTests:{tests}\n\n{feature.reviewer_note}\n')


def export(jax_repo: str, out_dir: str, tests_dir: str,
           manifest: manifest_lib.Manifest,
           series_name: str | None = None) -> list[str]:
  """Writes one ``git format-patch`` file per feature, in order.

  Args:
    jax_repo: an upstream jax git checkout; it is not modified.
    out_dir: where the patch files are written (created if missing).
    tests_dir: this repository's ``tests/pallas``.
    manifest: the loaded manifest.
    series_name: the series to export (default: the one that applies).

  Returns:
    The paths of the patch files, to ``git am`` in order.

  Raises:
    EnvironmentProblem: ``jax_repo`` is not a git checkout of jax.
    ConflictError: no series applies exactly, and the three-way rebase of
      the newest series onto the checkout conflicts.
  """
  if not os.path.isdir(os.path.join(jax_repo, 'jax', '_src', 'pallas')):
    raise errors.EnvironmentProblem(f'{jax_repo} is not a jax checkout.')
  _git(['rev-parse', '--verify', 'HEAD'], jax_repo)
  states = None
  try:
    series = choose_series(manifest, jax_repo, series_name)
  except errors.ConflictError as exact_failure:
    series = (manifest.series[series_name] if series_name is not None
              else nearest_series(manifest, checkout_version(jax_repo)))
    states = feature_states(series)
    logging.info('%s\nRebasing %s onto the checkout with three-way merges.',
                 exact_failure, series.name)
  with open(os.path.join(tests_dir, f'{HELPER}.py'), encoding='utf-8') as f:
    helper = for_jax_head(f.read())
  written = []
  work = tempfile.mkdtemp(prefix='export-upstream-')
  worktree = os.path.join(work, 'jax')
  staged = os.path.join(work, 'out')
  # Only the files the export touches are checked out; the index holds the
  # rest of HEAD, so the commits change nothing else.
  _git(['worktree', 'add', '--detach', '--no-checkout', worktree, 'HEAD'],
       jax_repo)
  try:
    _git(['read-tree', 'HEAD'], worktree)
    _git(['checkout', 'HEAD', '--', *series.files, BUILD, CHANGELOG],
         worktree)
    for number, feature in enumerate(FEATURES, start=1):
      patches = [p for p in series.patches
                 if p.name.startswith(feature.patch_prefixes)]
      if states is None:
        for patch in patches:
          gitapply.apply(patch.path, worktree)
      else:
        merge_feature(worktree, states[number - 1], states[number], feature)
      for test in feature.tests:
        with open(os.path.join(tests_dir, test), encoding='utf-8') as f:
          source = inline_helper(for_jax_head(f.read()), helper)
        with open(os.path.join(worktree, TEST_DIR, test), 'w',
                  encoding='utf-8') as f:
          f.write(source)
      _rewrite(os.path.join(worktree, BUILD), lambda s, ft=feature:
               add_build_targets(s, [t[:-3] for t in ft.tests]))
      _rewrite(os.path.join(worktree, CHANGELOG), lambda s, ft=feature:
               add_changelog_entry(s, ft.changelog))
      _git(['add', '--', *series.files, BUILD, CHANGELOG,
            *(os.path.join(TEST_DIR, t) for t in feature.tests)], worktree)
      subprocess.run(
          [gitapply.git_executable(), 'commit', '-q', '-F', '-'],
          cwd=worktree, input=commit_message(feature, patches), text=True,
          capture_output=True, check=True, env=_commit_env(worktree))
      written.append(_git(
          ['format-patch', '-1', '--zero-commit', '--no-signature',
           f'--start-number={number}', '-o', staged, 'HEAD'],
          worktree).strip())
    # Only a complete export is written.
    os.makedirs(out_dir, exist_ok=True)
    for i, path in enumerate(written):
      written[i] = shutil.copy(path, out_dir)
  finally:
    subprocess.run([gitapply.git_executable(), 'worktree', 'remove',
                    '--force', worktree], cwd=jax_repo, capture_output=True,
                   check=False)
    shutil.rmtree(work, ignore_errors=True)
  return written


def _commit_env(worktree: str) -> dict[str, str]:
  """The environment for commits: the user's identity, else a neutral one."""
  env = dict(os.environ)
  configured = subprocess.run(
      [gitapply.git_executable(), 'config', 'user.email'], cwd=worktree,
      capture_output=True, text=True, check=False).stdout.strip()
  if not configured:
    for kind in ('AUTHOR', 'COMMITTER'):
      env.setdefault(f'GIT_{kind}_NAME', 'jax-interpret-patches')
      env.setdefault(f'GIT_{kind}_EMAIL',
                     'jax-interpret-patches@users.noreply.github.com')
  return env


def _rewrite(path: str, edit) -> None:
  with open(path, encoding='utf-8') as f:
    text = f.read()
  with open(path, 'w', encoding='utf-8') as f:
    f.write(edit(text))
