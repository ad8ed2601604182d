"""``ftrun lighthouse``: torchft's lighthouse in the foreground, with its URL printed.

Runs torchft's own ``lighthouse_main`` (the ``torchft_lighthouse`` binary; same flags and
defaults) as a child that dies with us, relays its log, and prints the URL replica groups on
other hosts should use: the bind host, or this host's name when bound to all interfaces.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

from ftrun.errors import BadInput
from ftrun.launch.groups import LIGHTHOUSE_ENTRY
from ftrun.launch.procs import spawn, stop_tree

_BIND_RE = re.compile(r"^(\[[0-9a-fA-F:]*\]|[A-Za-z0-9.\-]+):(\d{1,5})$")
_LISTEN_RE = re.compile(r"listening on: https?://[^:/\s]+:(\d+)")


def public_url(bind_host: str, port: int) -> str:
    host = bind_host.strip("[]")
    if host in ("", "::", "0.0.0.0"):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def serve(bind: str, min_replicas: int, join_timeout_ms: int, quorum_tick_ms: int, heartbeat_timeout_ms: int) -> int:
    m = _BIND_RE.match(bind)
    if not m or int(m[2]) > 65535:
        raise BadInput(f"--bind {bind!r}: expected HOST:PORT, e.g. 0.0.0.0:29510 or [::]:29510")
    if min_replicas < 1:
        raise BadInput(f"--min-replicas {min_replicas}: must be at least 1")
    for name, v in (("--join-timeout-ms", join_timeout_ms), ("--quorum-tick-ms", quorum_tick_ms), ("--heartbeat-timeout-ms", heartbeat_timeout_ms)):
        if v <= 0:
            raise BadInput(f"{name} {v}: must be > 0")
    argv = [
        sys.executable, LIGHTHOUSE_ENTRY, "--bind", bind, "--min_replicas", str(min_replicas),
        "--join_timeout_ms", str(join_timeout_ms), "--quorum_tick_ms", str(quorum_tick_ms),
        "--heartbeat_timeout_ms", str(heartbeat_timeout_ms),
    ]
    import os

    proc = spawn(argv, dict(os.environ), subprocess.PIPE)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)  # also when started with SIGINT ignored (a shell's `cmd &`)
    announced = False
    held: list[str] = []  # the child's output before it listens: shown only if it then runs
    try:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            hit = _LISTEN_RE.search(line)
            if hit and not announced:
                announced = True
                print(f"lighthouse: {public_url(m[1], int(hit[1]))}", flush=True)
                for h in held:
                    print(h, file=sys.stderr, flush=True)
                held.clear()
            if announced:
                print(line, file=sys.stderr, flush=True)
            else:
                held.append(line)
        code = proc.wait()
    except KeyboardInterrupt:
        stop_tree(proc, grace_s=2.0)
        return 0
    if code != 0 or not announced:
        cause = _cause(held)
        raise BadInput(f"--bind {bind}: the lighthouse could not start ({cause})" if cause
                       else f"--bind {bind}: the lighthouse exited with code {code} (is the port already in use?)")
    return 0


def _cause(lines: list[str]) -> str:
    """The child's reason, from its output: the last line naming an error, trimmed."""
    errs = [ln.strip() for ln in lines if "rror" in ln or "in use" in ln.lower()]
    if not errs:
        return ""
    text = errs[-1]
    hit = re.search(r"[Aa]ddress already in use|[Pp]ermission denied|[Cc]annot assign requested address", text)
    return hit[0] if hit else text[-200:]
