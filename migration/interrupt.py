"""SIGINT, SIGTERM and SIGHUP end a run cleanly, never in a commit's middle.

``install`` makes each of the three signals raise ``Interrupted`` (a
``BaseException``, like ``KeyboardInterrupt``, so ``except Exception`` does
not swallow it) in the main thread. Everything the tool writes cleans up
after a ``BaseException``: a temporary file is removed, a scratch directory
too, a run's lock released. Inside ``deferred()`` (the commit of apply and
revert, and the settling of an interrupted run, which replace files in
site-packages) a signal is only noted and raised when the block ends, so
the step in progress finishes (or, on an error, is rolled back as usual).
Removing a temporary file or a scratch directory (``fsutil``) defers a
signal too, so cleanup is not cut short. A signal that comes while Python
runs a finalizer (``__del__``), where an exception would only be printed
and dropped, is noted too, and raised at the end of the next ``deferred()``
block or by ``raise_pending`` before the run prints its outcome. Once the
run's outcome is decided, ``hold`` blocks the signals, so a run that printed
success exits 0.

A signal that comes before ``python -m migration`` runs its first line
gets Python's default action (SIGINT: ``KeyboardInterrupt``).

The CLI exits ``128 + the signal's number`` (130 for SIGINT, 143 for
SIGTERM, 129 for SIGHUP), as a shell reports a process a signal ended.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Iterator

from migration import errors

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_depth = 0  # How many deferred() blocks are open (+1 after hold()).
_installed = False  # Whether install() ran: the process is the tool's.
_pending: int | None = None  # A signal noted while deferred.


class Interrupted(BaseException):
  """A signal ended the run; see the module doc.

  Attributes:
    signum: the signal's number.
    exit_code: ``128 + signum`` (an ``errors.ExitCode``).
  """

  def __init__(self, signum: int):
    self.signum = signum
    self.exit_code = errors.ExitCode(128 + signum)
    super().__init__(
        f'Stopped by {signal.Signals(signum).name}; the step in progress was '
        'finished or undone: jax is pristine or fully patched (python -m '
        'migration status says which) and no partial file is left.')


def _in_finalizer(frame) -> bool:
  """Whether ``frame`` runs inside a ``__del__`` method.

  An exception raised there is not propagated: Python prints it as
  "Exception ignored in ..." with a traceback and goes on.
  """
  while frame is not None:
    if frame.f_code.co_name == '__del__':
      return True
    frame = frame.f_back
  return False


def _handler(signum: int, frame) -> None:
  global _pending
  if _depth or _in_finalizer(frame):
    if _pending is None:
      _pending = signum
    return
  raise Interrupted(signum)


def raise_pending() -> None:
  """Raises ``Interrupted`` for a signal noted outside a ``deferred()``
  block (one that came during a finalizer, e.g. ``subprocess.Popen``'s).

  Raises:
    Interrupted: such a signal is pending.
  """
  global _pending
  if not _depth and _pending is not None:
    signum, _pending = _pending, None
    raise Interrupted(signum)


def install() -> None:
  """Handles the three signals in this (the main) thread.

  A signal the process was started with ignored (``nohup``) stays ignored;
  one it was started with blocked (a signal mask inherited from the parent)
  is unblocked, so it is handled rather than left pending.
  """
  global _installed
  _installed = True
  for signum in SIGNALS:
    if signal.getsignal(signum) is not signal.SIG_IGN:
      signal.signal(signum, _handler)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
  """Holds back ``Interrupted`` until the block ends.

  Raises:
    Interrupted: a signal came while the block ran and it ended normally.
  """
  global _depth, _pending
  _depth += 1
  try:
    yield
  finally:
    _depth -= 1
  if not _depth and _pending is not None:
    signum, _pending = _pending, None
    raise Interrupted(signum)


def hold() -> None:
  """From now on the signals are blocked: the run's outcome is decided.

  Blocked, not handled: Python restores their default action late in its
  shutdown, where one would end the process after its success message.
  Does nothing where ``install`` did not run (the CLI called in-process, as
  by tests): the signal mask would outlive the call and be inherited by
  every process started afterwards.
  """
  global _depth
  if not _installed:
    return
  _depth += 1
  signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


@contextlib.contextmanager
def exit_on_signal() -> Iterator[None]:
  """Ends the process with the signal's code if ``Interrupted`` escapes.

  For what runs before the CLI's own handling (imports, flag parsing):
  nothing was changed yet. On the way out (``SystemExit``) the signals are
  blocked (``hold``).
  """
  try:
    yield
  except SystemExit:
    hold()
    raise
  except Interrupted as e:
    hold()
    if sys.stderr is not None:
      with contextlib.suppress(OSError):
        sys.stderr.write(f'Error ({e.exit_code.name.lower()}, exit code '
                         f'{int(e.exit_code)}): {e}\n')
    sys.exit(int(e.exit_code))
