"""torchft's lighthouse as a child: its argv, the URL other hosts use, the cause of a failed start.

Runs torchft's own ``lighthouse_main`` (the ``torchft_lighthouse`` binary; same flags and
defaults) through ``lighthouse_entry.py``. Used by ``ftrun lighthouse`` (foreground) and by
``ftrun train`` (one on loopback per run, ``ftrun.launch.groups.start_lighthouse``).
"""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path
from urllib.parse import urlparse

from ftrun.launch.hosts import url_host

LIGHTHOUSE_ENTRY = str(Path(__file__).with_name("lighthouse_entry.py"))
LISTEN_RE = re.compile(r"listening on: https?://[^:/\s]+:(\d+)")


def lighthouse_argv(
    bind: str, min_replicas: int, join_timeout_ms: int, quorum_tick_ms: int, heartbeat_timeout_ms: int
) -> list[str]:
    """The command line of a lighthouse bound to ``bind`` (HOST:PORT)."""
    return [
        sys.executable,
        LIGHTHOUSE_ENTRY,
        "--bind",
        bind,
        "--min_replicas",
        str(min_replicas),
        "--join_timeout_ms",
        str(join_timeout_ms),
        "--quorum_tick_ms",
        str(quorum_tick_ms),
        "--heartbeat_timeout_ms",
        str(heartbeat_timeout_ms),
    ]


def public_url(bind_host: str, port: int) -> str:
    return f"http://{url_host(bind_host)}:{port}"


def start_cause(lines: list[str]) -> str:
    """The child's reason for not starting, from its output: the last line naming an error, trimmed."""
    errs = [ln.strip() for ln in lines if "rror" in ln or "in use" in ln.lower()]
    if not errs:
        return ""
    text = errs[-1]
    hit = re.search(r"[Aa]ddress already in use|[Pp]ermission denied|[Cc]annot assign requested address", text)
    return hit[0] if hit else text[-200:]


def unreachable(url: str, timeout_s: float) -> str | None:
    """Why a lighthouse at ``url`` does not accept a TCP connection within ``timeout_s``, or None."""
    u = urlparse(url)
    host, port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__
