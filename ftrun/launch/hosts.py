"""Host names of a server ftrun starts: what others call it, and where to probe it from here."""

from __future__ import annotations

import socket

WILDCARDS = ("", "0.0.0.0", "::")


def url_host(bind_host: str) -> str:
    """The name others reach a server bound to ``bind_host`` at: this host's name for a wildcard
    bind (``""``, ``0.0.0.0``, ``::``), an IPv6 literal in brackets, else the host as given."""
    host = bind_host.strip("[]")
    if host in WILDCARDS:
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def probe_host(bind_host: str) -> str:
    """Where this host reaches a server bound to ``bind_host``: loopback for a wildcard bind."""
    h = bind_host.strip("[]")
    if h in ("", "0.0.0.0"):
        return "127.0.0.1"
    if h == "::":
        return "::1"
    return h
