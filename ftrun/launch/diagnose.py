"""Why a process failed, from its log: the one home for reading an error out of a log. Torch-free.

* ``error_line(text)``: THE error line of a log: its first exception line (``SomeError: msg``),
  else its first line naming an error; torchrun's own failure report (its banner lines) is
  never the cause.
* ``rank_signal(text)``: torchrun's report of a rank that died by a signal (the rank itself
  wrote nothing): ``rank 1 was killed by SIGKILL (signal 9)``.
* ``failure_cause(text)``: the two together, what a failed group's message says.
* ``describe(text)``: ``failure_cause``, else the log's last line, else ``no output``.
* ``read_log(path, since)``: a log's text from byte ``since`` (a group's last incarnation),
  bounded: a huge log is read as its head and its tail.
* ``ftrun_error(text)``: the one ``error: ...`` line an ftrun command printed.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

from ftrun.small_files import read_ends

MAX_LINE = 300  # characters of a line quoted in a message
READ_LIMIT = 8 << 20  # bytes of a log read at most: its first and its last half of this

# torchrun's own report of a failed child: never the cause
_BANNER = ("To enable traceback see", "ChildFailedError", "error_file:", "exitcode  :", "elastic/multiprocessing")
_EXC_RE = re.compile(
    r"^(?:\[(?:rank|default)\d*\]:\s*)?((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Failure|Exit)\b:?.*)$"
)
# torchrun's report of a rank that died by a signal: "rank : 1 (local_rank: 1)" then
# "exitcode : -9 (pid: 123)  (SIGKILL)"
_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)\b")
_SIGNAL_EXIT_RE = re.compile(r"^\s*exitcode\s*:\s*-(\d+)\b")


def _is_banner(line: str) -> bool:
    return any(b in line for b in _BANNER)


def _names_error(line: str) -> bool:
    return ("Error" in line or "error" in line) and not _is_banner(line)


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def error_line(text: str) -> str:
    """The first exception line of a log, skipping torchrun's own failure report; else its first
    line naming an error; else ''."""
    lines = _lines(text)
    for ln in lines:
        m = _EXC_RE.match(ln)
        if m and not _is_banner(ln):
            return m[1].strip()[:MAX_LINE]
    return next((ln[:MAX_LINE] for ln in lines if _names_error(ln)), "")


def last_line(text: str) -> str:
    """The last line naming an error (a live process's latest trouble), else the last line; else ''."""
    lines = _lines(text)
    return ([ln for ln in lines if _names_error(ln)] or lines or [""])[-1][:MAX_LINE]


def exit_description(code: int) -> str:
    """``exited with code N``, or ``was killed by SIGKILL (signal 9)`` for a negative code."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"was killed by signal {-code}"
    return f"was killed by {name} (signal {-code})"


def rank_signal(text: str) -> str:
    """``rank R was killed by SIGKILL (signal 9)`` from torchrun's failure report in a group
    log, for the first rank that died by a signal; else ''."""
    rank = None
    for ln in text.splitlines():
        if m := _RANK_RE.match(ln):
            rank = m[1]
        elif (m := _SIGNAL_EXIT_RE.match(ln)) and rank is not None:
            return f"rank {rank} {exit_description(-int(m[1]))}"
    return ""


def failure_cause(text: str) -> str:
    """Why a group's ranks failed, from its log: a rank's death by a signal (what torchrun
    reports; the error line is added when there is one), else the error line; else ''."""
    exc, sig = error_line(text), rank_signal(text)
    if sig:
        return sig + (f"; first error in the log: {exc}" if exc else "")
    return exc


def describe(text: str) -> str:
    """``failure_cause``, else ``last line: ...``, else ``no output``."""
    lines = _lines(text)
    return failure_cause(text) or (f"last line: {lines[-1][:MAX_LINE]}" if lines else "no output")


def read_log(path: Path, since: int = 0) -> str | None:
    """The log's text from byte ``since`` (None: missing, not a regular file, unreadable). Past
    ``READ_LIMIT`` bytes only its head and its tail (``small_files.read_ends``): the first
    exception is near the start, torchrun's report at the end."""
    data = read_ends(Path(path), since, READ_LIMIT)
    return None if data is None else data.decode(errors="replace")


def ftrun_error(text: str) -> str | None:
    """The one error line an ftrun command printed (``error: ...``, without the prefix), else
    its output's last line; None for no output."""
    lines = _lines(text)
    for x in lines:
        if x.startswith("error:"):
            return x[len("error:") :].strip()
    return lines[-1] if lines else None
