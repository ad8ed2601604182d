"""User-facing errors. ``BadInput`` = something the user gave us is wrong: one line, exit 2."""

from __future__ import annotations


class BadInput(Exception):
    """A bad flag, config key, path or file. The message is one line naming what and where."""

    exit_code = 2


class RunFailed(Exception):
    """The run itself failed (a group crashed, replicas disagreed). Exit 1, with a pointer to logs."""

    exit_code = 1
