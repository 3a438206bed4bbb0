"""Errors raised by the migration tool, each tied to one exit code."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
  """Process exit codes of ``python -m migration``."""
  OK = 0  # Success, including a no-op (already patched / already pristine).
  INTERNAL = 1  # A bug in this tool or an unexpected failure.
  USAGE = 2  # Bad command line.
  UNSUPPORTED = 3  # jax is not installed, or its version is not served.
  MODIFIED = 4  # Target files locally modified, or a patch conflicts.
  ENVIRONMENT = 5  # git missing, site-packages not writable, ...
  LOCKED = 6  # Another run holds the lock.
  PATCH_DATA = 7  # Patches/manifest corrupted, missing or out of date.
  # Stopped by a signal (128 + its number), the step in progress finished
  # or undone (interrupt.py).
  SIGHUP = 129
  SIGINT = 130
  SIGTERM = 143


class MigrationError(Exception):
  """Base class; ``exit_code`` says how the CLI exits."""
  exit_code: ExitCode = ExitCode.INTERNAL


class UsageError(MigrationError):
  exit_code = ExitCode.USAGE


class UnsupportedError(MigrationError):
  exit_code = ExitCode.UNSUPPORTED


class ModifiedError(MigrationError):
  exit_code = ExitCode.MODIFIED


class ConflictError(MigrationError):
  exit_code = ExitCode.MODIFIED


class EnvironmentProblem(MigrationError):
  exit_code = ExitCode.ENVIRONMENT


class LockedError(MigrationError):
  exit_code = ExitCode.LOCKED


class PatchDataError(MigrationError):
  exit_code = ExitCode.PATCH_DATA
