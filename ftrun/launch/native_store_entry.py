"""Host the bootstrap store of ``--backend gloo-native`` (``ftrun.launch.native_store``); run by path.

torch's ``TCPStore`` server, bound to ``HOST:PORT`` (argv[1]), until this process is signalled:
every replica group's native Gloo group bootstraps and reconfigures on it
(``ftrun.worker.native_pg``). Prints one ``listening on HOST:PORT`` line once it accepts.
"""

import signal
import sys
from datetime import timedelta

if __name__ == "__main__":
    from torch.distributed import TCPStore

    host, _, port = sys.argv[1].rpartition(":")
    store = TCPStore(host, int(port), is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    print(f"listening on {host}:{store.port}", flush=True)
    while True:  # until SIGTERM (ftrun's stop, or its death: procs.spawn), whose default action ends it
        signal.pause()
