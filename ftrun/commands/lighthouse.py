"""``ftrun lighthouse``: torchft's lighthouse in the foreground, with its URL printed.

Starts the lighthouse (``ftrun.launch.lighthouse``) as a child that dies with us, relays its
log, and prints the URL replica groups on other hosts should use: the bind host, or this
host's name when bound to all interfaces. Ctrl-C / SIGTERM stop it (exit 0).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ftrun.console import escape_controls
from ftrun.errors import BadInput
from ftrun.launch.lighthouse import LISTEN_RE, lighthouse_argv, public_url, start_cause
from ftrun.launch.procs import spawn, stop_tree

_BIND_RE = re.compile(r"^(\[[0-9a-fA-F:]*\]|[A-Za-z0-9.\-]+):(\d{1,5})$")


def serve(bind: str, min_replicas: int, join_timeout_ms: int, quorum_tick_ms: int, heartbeat_timeout_ms: int) -> int:
    m = _BIND_RE.match(bind)
    if not m or int(m[2]) > 65535:
        raise BadInput(f"--bind {bind!r}: expected HOST:PORT, e.g. 0.0.0.0:29510 or [::]:29510")
    if min_replicas < 1:
        raise BadInput(f"--min-replicas {min_replicas}: must be at least 1")
    for name, v in (
        ("--join-timeout-ms", join_timeout_ms),
        ("--quorum-tick-ms", quorum_tick_ms),
        ("--heartbeat-timeout-ms", heartbeat_timeout_ms),
    ):
        if v <= 0:
            raise BadInput(f"{name} {v}: must be > 0")
    argv = lighthouse_argv(bind, min_replicas, join_timeout_ms, quorum_tick_ms, heartbeat_timeout_ms)
    proc = spawn(argv, dict(os.environ), subprocess.PIPE)
    announced = False
    held: list[str] = []  # the child's output before it listens: shown only if it then runs
    assert proc.stdout is not None  # spawned with stdout=PIPE
    try:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            hit = LISTEN_RE.search(line)
            if hit and not announced:
                announced = True
                print(f"lighthouse: {public_url(m[1], int(hit[1]))}", flush=True)
                for h in held:
                    print(escape_controls(h), file=sys.stderr, flush=True)
                held.clear()
            if announced:  # the binary's output, shown: no control character raw
                print(escape_controls(line), file=sys.stderr, flush=True)
            else:
                held.append(line)
        code = proc.wait()
    except KeyboardInterrupt as e:  # the usual way to stop a lighthouse; still 130, as every interrupt
        stop_tree(proc, grace_s=2.0)
        print(f"lighthouse: stopped by {e or 'SIGINT'}", file=sys.stderr, flush=True)
        return 130
    if code != 0 or not announced:
        cause = start_cause(held)
        raise BadInput(
            f"--bind {bind}: the lighthouse could not start ({cause})"
            if cause
            else f"--bind {bind}: the lighthouse exited with code {code} (is the port already in use?)"
        )
    return 0
