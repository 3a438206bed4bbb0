"""Keeps upstream's Bazel deps in step with the imports an exported commit adds.

Upstream jax builds its libraries with strict deps
(``pytype_strict_library``): a library must list, in ``deps``, the target of
every module it imports. When an exported commit makes a file import a module
it did not import before (e.g. ``sc_core`` in ``interpret_pallas_call.py``),
the target that owns the file must list that module's target. This module
finds such imports and edits the BUILD files:

- the imports a commit adds to a file are the modules imported (anywhere in
  it, found with ``ast``) after the commit and not before;
- a module of the checkout is a file ``a/b/c.py`` (or ``a/b/c/__init__.py``);
  its target is the one in the nearest ``BUILD`` (or ``BUILD.bazel``) above it
  that lists the file in ``srcs`` (a target that names the file is preferred to
  one whose ``glob`` matches it, as ``//jax/experimental:pallas_tpu_sc`` is to
  ``:pallas``);
- a library gets every such target; a test (a rule whose name ends in
  ``_test``, such as upstream's ``jax_multiplatform_test``) gets only the
  targets of modules outside ``jax/_src`` that are not among the deps that
  ``jax_multiplatform_test`` adds itself (``jaxlib/jax.bzl``), as upstream's
  test targets list the public targets they import (e.g.
  ``//jax/experimental:pallas_tpu_sc`` for ``tpu_sc``);
- the standard library needs no target; a third-party module must already be
  named in the target (``py_deps("numpy")``).

A new label goes into the target's ``deps`` list at its sorted place
(buildifier's order: ``:local`` labels first, then ``//`` labels by package
and name), one per line, as upstream writes them. Anything this cannot do
(no BUILD file, no target that owns a file, a ``deps`` that is not a
multi-line list) stops the export with a message that says what to edit by
hand.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import os
import re
import sys
import tokenize

from migration import errors

BUILD_FILES = ('BUILD', 'BUILD.bazel')
# What upstream's jax_multiplatform_test (jaxlib/jax.bzl) adds to every test's
# deps.
IMPLICIT_TEST_DEPS = ('//jax:jax', '//jax/_src:test_util')


@dataclasses.dataclass(frozen=True)
class Target:
  """A rule of a BUILD file, as far as deps go."""
  package: str  # e.g. 'jax/_src/pallas/mosaic/interpret'
  name: str
  rule: str  # e.g. 'pytype_strict_library'
  deps: tuple[str, ...]  # the string labels of its deps list, normalized
  text: str  # the rule's source text
  deps_list: ast.List | None  # the literal list the deps start with

  @property
  def label(self) -> str:
    return f'//{self.package}:{self.name}'

  @property
  def is_test(self) -> bool:
    return self.rule.endswith('_test')


def normalize(label: str, package: str) -> str:
  """Returns ``//pkg:name`` for a label written in ``package``'s BUILD file."""
  if label.startswith(':'):
    return f'//{package}{label}'
  if label.startswith('//') and ':' not in label:
    return f'{label}:{os.path.basename(label)}'
  return label


def spelled(label: str, package: str) -> str:
  """Returns a normalized label as upstream writes it in ``package``."""
  pkg, name = label[2:].split(':')
  if pkg == package:
    return f':{name}'
  if name == os.path.basename(pkg):
    return f'//{pkg}'
  return label


def _sort_key(label: str) -> tuple:
  # buildifier: local labels, then absolute ones, then the rest.
  phase = 0 if label.startswith(':') else 1 if label.startswith('//') else 2
  return (phase, label.split(':'))


def _glob_regex(pattern: str) -> str:
  out = ''
  i = 0
  while i < len(pattern):
    if pattern.startswith('**/', i):
      out += '(?:.*/)?'
      i += 3
    elif pattern[i] == '*':
      out += '[^/]*'
      i += 1
    else:
      out += re.escape(pattern[i])
      i += 1
  return out + r'\Z'


def _strings(node: ast.AST | None) -> list[str]:
  if isinstance(node, ast.List):
    return [e.value for e in node.elts
            if isinstance(e, ast.Constant) and isinstance(e.value, str)]
  return []


def _owns(call: ast.Call, path: str) -> int:
  """2 if the rule names ``path`` in srcs, 1 if its glob matches, else 0.

  ``srcs`` may be a sum of lists and globs (upstream's ``//jax:jax`` is
  ``glob([...]) + [...]``).
  """
  parts = [next((k.value for k in call.keywords if k.arg == 'srcs'), None)]
  rank = 0
  while parts:
    srcs = parts.pop()
    if isinstance(srcs, ast.BinOp):
      parts += [srcs.left, srcs.right]
    elif path in _strings(srcs):
      return 2
    elif (isinstance(srcs, ast.Call)
          and getattr(srcs.func, 'id', '') == 'glob'):
      include = _strings(srcs.args[0] if srcs.args else None)
      exclude = _strings(next((k.value for k in srcs.keywords
                               if k.arg == 'exclude'), None))
      if any(re.match(_glob_regex(p), path) for p in include) and not any(
          re.match(_glob_regex(p), path) for p in exclude):
        rank = 1
  return rank


def find_build_file(root: str, directory: str) -> str | None:
  """Returns the BUILD file of ``directory``'s package, relative to root."""
  while True:
    for name in BUILD_FILES:
      if os.path.isfile(os.path.join(root, directory, name)):
        return os.path.join(directory, name) if directory else name
    if not directory:
      return None
    directory = os.path.dirname(directory)


def owning_target(root: str, path: str) -> tuple[str, Target]:
  """Returns the BUILD file and the target whose srcs hold ``path``.

  Args:
    root: the checkout.
    path: a source file, relative to ``root``.

  Raises:
    PatchDataError: no BUILD file above the file, or no target owns it.
  """
  build = find_build_file(root, os.path.dirname(path))
  if build is None:
    raise errors.PatchDataError(f'No BUILD file above {path}.')
  package = os.path.dirname(build)
  with open(os.path.join(root, build), encoding='utf-8') as f:
    text = f.read()
  relative = os.path.relpath(path, package) if package else path
  best, best_rank = None, 0
  for node in ast.parse(text).body:
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
      continue
    call = node.value
    rank = _owns(call, relative)
    if rank > best_rank:
      best, best_rank = call, rank
  if best is None:
    raise errors.PatchDataError(
        f'No target of {build} has {relative} in its srcs; add the deps '
        'the export needs by hand.')
  deps = next((k.value for k in best.keywords if k.arg == 'deps'), None)
  while isinstance(deps, ast.BinOp):
    deps = deps.left
  name = next(k.value.value for k in best.keywords if k.arg == 'name')
  return build, Target(
      package=package, name=name, rule=getattr(best.func, 'id', ''),
      deps=tuple(normalize(d, package) for d in _strings(deps)),
      text=ast.get_source_segment(text, best) or '',
      deps_list=deps if isinstance(deps, ast.List) else None)


def _import_statements(source: str):
  """Yields each import statement's tokens (names and punctuation).

  Tokens rather than ``ast``: upstream's files may use syntax newer than
  the Python this tool runs on (e.g. PEP 695 type parameters).
  """
  statement = []
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
      if statement and statement[0] in ('import', 'from'):
        yield statement
      statement = []
    elif token.type in (tokenize.NAME, tokenize.OP):
      if token.string == ';':
        if statement and statement[0] in ('import', 'from'):
          yield statement
        statement = []
      else:
        statement.append(token.string)


def imported_modules(source: str, path: str, root: str) -> set[str]:
  """Returns every module a Python file imports, as dotted names.

  Args:
    source: the file's text.
    path: the file, relative to ``root`` (for relative imports).
    root: the checkout: ``from a.b import c`` gives ``a.b.c`` if that is a
      module of the checkout, else ``a.b``.
  """
  modules = set()
  package = os.path.dirname(path).replace(os.sep, '.')
  for tokens in _import_statements(source):
    at = tokens.index('import')
    groups = [[]]
    for token in tokens[at + 1:]:
      if token == ',':
        groups.append([])
      elif token not in ('(', ')'):
        groups[-1].append(token)
    names = [''.join(g[:g.index('as')] if 'as' in g else g)
             for g in groups if g]
    if tokens[0] == 'import':
      modules.update(names)
      continue
    base = ''.join(tokens[1:at])
    level = len(base) - len(base.lstrip('.'))
    base = base.lstrip('.')
    if level:
      parts = package.split('.')
      parts = parts[:len(parts) - level + 1]
      base = '.'.join(parts + ([base] if base else []))
    for name in names:
      submodule = f'{base}.{name}'
      modules.add(submodule if module_file(root, submodule) else base)
  return modules


def module_file(root: str, module: str) -> str | None:
  """Returns the checkout's file of a module (relative), or None."""
  path = module.replace('.', '/')
  for candidate in (path + '.py', path + '/__init__.py'):
    if os.path.isfile(os.path.join(root, candidate)):
      return candidate
  return None


def needed_labels(root: str, path: str, target: Target,
                  added: set[str]) -> list[str]:
  """Returns the normalized labels ``target`` must get for new imports.

  Args:
    root: the checkout.
    path: the file that got the imports.
    target: the target that owns it.
    added: the modules newly imported (``imported_modules`` after minus
      before).

  Raises:
    PatchDataError: a third-party module the target does not name, or a
      module of the checkout that no target owns.
  """
  labels = set()
  for module in sorted(added):
    file = module_file(root, module)
    top = module.split('.')[0]
    if file is None:
      if top in sys.stdlib_module_names or module_file(root, top):
        continue
      if f'"{top}"' not in target.text:
        raise errors.PatchDataError(
            f'{path} now imports {module}, which {target.label} does not '
            'name; add it to its py_deps by hand.')
      continue
    if target.is_test and (file.startswith('jax/_src/') or module == 'jax'):
      continue
    _, owner = owning_target(root, file)
    if owner.label == target.label:
      continue
    labels.add(owner.label)
  implicit = IMPLICIT_TEST_DEPS if target.is_test else ()
  return sorted(labels - set(target.deps) - set(implicit))


def add_deps(build_text: str, target: Target, labels: list[str]) -> str:
  """Returns a BUILD file's text with labels added to a target's deps.

  Each label goes on its own line at its sorted place in the literal list the
  target's ``deps`` start with, spelled as upstream does (``:x`` in the same
  package, ``//a/b`` for ``//a/b:b``).

  Raises:
    PatchDataError: the target's deps are not a multi-line list.
  """
  node = target.deps_list
  if node is None or not node.elts or node.lineno == node.end_lineno:
    raise errors.PatchDataError(
        f'{target.label}: deps is not a list with one label per line; add '
        f'{", ".join(labels)} by hand.')
  lines = build_text.splitlines(keepends=True)
  # The list's lines that hold a label (ast's line numbers are 1-based).
  elements = [(i, lines[i].split('"')[1])
              for i in range(node.elts[0].lineno - 1, node.end_lineno - 1)
              if lines[i].strip().startswith('"')]
  indent = re.match(r'\s*', lines[elements[0][0]]).group(0)
  insertions = []
  for label in labels:
    new = spelled(label, target.package)
    later = [i for i, existing in elements
             if _sort_key(existing) > _sort_key(new)]
    insertions.append((later[0] if later else elements[-1][0] + 1, new))
  # Bottom up, so that the line numbers above stay right; labels that go to
  # the same line are inserted in reverse to end up sorted.
  for at, new in sorted(insertions, key=lambda x: (x[0], _sort_key(x[1])),
                        reverse=True):
    lines.insert(at, f'{indent}"{new}",\n')
  return ''.join(lines)


def add_library(root: str, path: str) -> str:
  """Adds a target for a new module to the BUILD file of its folder.

  The target is a ``pytype_strict_library`` named after the module, with the
  ``type_checking`` of the file's other libraries, appended to the file as
  upstream's interpreter folder lists one module per target; its deps are
  the targets of the modules it imports (``needed_labels``), one per line,
  and ``py_deps`` of the third-party ones.

  Args:
    root: the checkout, with the module written.
    path: the module, relative to ``root``.

  Returns:
    The BUILD file changed, relative to ``root``.

  Raises:
    PatchDataError: the module's folder has no BUILD file of its own, or
      one of its imports has no target.
  """
  directory, name = os.path.split(path)
  build = find_build_file(root, directory)
  if build is None or os.path.dirname(build) != directory:
    raise errors.PatchDataError(
        f'{path} is new and {directory} has no BUILD file of its own; add '
        'its target by hand.')
  with open(os.path.join(root, path), encoding='utf-8') as f:
    source = f.read()
  with open(os.path.join(root, build), encoding='utf-8') as f:
    text = f.read()
  stem = name[:-len('.py')]
  modules = imported_modules(source, path, root)
  third_party = sorted({
      m.split('.')[0] for m in modules
      if module_file(root, m) is None and m.split('.')[0] not in
      sys.stdlib_module_names and module_file(root, m.split('.')[0]) is None})
  stand_in = Target(directory, stem, 'pytype_strict_library', (),
                    ''.join(f'"{t}"' for t in third_party), None)
  labels = needed_labels(root, path, stand_in, modules)
  checking = re.search(r'\n    type_checking = "[^"]*",\n', text)
  deps = ''.join(f'        "{spelled(label, directory)}",\n'
                 for label in sorted(labels, key=lambda x: _sort_key(
                     spelled(x, directory))))
  py = ''.join(f' + py_deps("{t}")' for t in third_party)
  rule = (f'\npytype_strict_library(\n    name = "{stem}",\n'
          f'    srcs = ["{name}"],\n'
          + (checking.group(0)[1:] if checking else '')
          + (f'    deps = [\n{deps}    ]{py},\n' if deps else
             f'    deps = {py[3:]},\n' if py else '')
          + ')\n')
  with open(os.path.join(root, build), 'w', encoding='utf-8') as f:
    f.write(text.rstrip('\n') + '\n' + rule)
  return build


def update_build_files(root: str, before: dict[str, str | None]) -> list[str]:
  """Adds to upstream's BUILD files the deps of the imports a commit adds.

  A module the commit adds gets a target of its own first (``add_library``),
  so that the files importing it get that target.

  Args:
    root: the checkout (worktree) with the commit's files written.
    before: each changed file's text before the commit (relative path to
      text; None: the file did not exist); files that are not Python are
      ignored.

  Returns:
    The BUILD files changed, relative to ``root``.

  Raises:
    PatchDataError: see ``add_library``, ``owning_target``,
      ``needed_labels`` and ``add_deps``.
  """
  changed = []
  for path in sorted(before):
    if (path.endswith('.py') and before[path] is None
        and os.path.isfile(os.path.join(root, path))):
      build = add_library(root, path)
      if build not in changed:
        changed.append(build)
  for path in sorted(before):
    if (not path.endswith('.py') or before[path] is None
        or not os.path.isfile(os.path.join(root, path))):
      continue
    with open(os.path.join(root, path), encoding='utf-8') as f:
      after = f.read()
    added = (imported_modules(after, path, root)
             - imported_modules(before[path], path, root))
    if not added:
      continue
    build, target = owning_target(root, path)
    labels = needed_labels(root, path, target, added)
    if not labels:
      continue
    with open(os.path.join(root, build), encoding='utf-8') as f:
      text = f.read()
    with open(os.path.join(root, build), 'w', encoding='utf-8') as f:
      f.write(add_deps(text, target, labels))
    if build not in changed:
      changed.append(build)
  return changed
