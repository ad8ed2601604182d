"""The bootstrap store of ``--backend gloo-native``, hosted where every replica group reaches it.

torch's native reconfigurable Gloo group (``ftrun.worker.native_pg``) needs one ``TCPStore`` that
all replica groups share for the life of the run (each quorum's communicator is made on it), so it
cannot live in a replica group that a fault kills. ftrun's process that starts the groups runs
it in a child (``native_store_entry.py``: torch's own store server; this process does not import
torch), started before the groups and stopped after them like the lighthouse, and the spec
records its address (``Spec.native_store``). Every group of the job runs on this host
(``preflight.check_backend`` refuses gloo-native across hosts).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ftrun import layout
from ftrun.launch.procs import spawn

NATIVE_STORE_ENTRY = str(Path(__file__).with_name("native_store_entry.py"))


@dataclass
class NativeStore:
    proc: subprocess.Popen
    address: str  # host:port, what the spec hands the ranks
    log: Path


def start_native_store(run_dir: Path, host: str, port: int) -> NativeStore:
    """Start the store child bound to ``host:port`` (a free port the caller chose); its output
    goes to ``logs/native_store.log``. The ranks' store clients wait for it to accept."""
    log_path = run_dir / layout.LOGS / "native_store.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = spawn([sys.executable, NATIVE_STORE_ENTRY, f"{host}:{port}"], dict(os.environ), log)
    return NativeStore(proc, f"{host}:{port}", log_path)
