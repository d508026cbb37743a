"""The CLI's own error: a mistake in how a command was called, printed as one line (exit 2)."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in how the command was called; printed as one line."""
