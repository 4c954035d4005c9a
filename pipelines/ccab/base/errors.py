"""The one error path to a person: an error a user can fix is a :class:`UserError` (one line,
naming what failed and what to do) and exits with its ``exit_code``; :func:`fail` prints the same
line from a command that returns its exit code instead of raising."""

from __future__ import annotations

import sys


class UserError(Exception):
    """Bad input or a missing resource: shown as one line, no traceback."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def fail(prog: str, message: str, code: int = 2) -> int:
    """Print ``ccab <prog>: <message>`` on stderr and return ``code`` (a command's exit code)."""
    print(f"ccab {prog}: {message}", file=sys.stderr)
    return code
