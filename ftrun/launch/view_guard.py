"""The watchdog of ``ftrun view``'s TensorBoard: ends its process group and removes the view's
temp dir when ``ftrun view`` ends without doing so itself (SIGKILL). Torch-free, stdlib only.

TensorBoard runs in its own process group with a parent-death signal, but its profiler
plugin's worker processes get none: a SIGKILLed view would leave them running (re-parented to
init) and its ``ftrun-view-*`` temp dir on disk. So the view starts this guard, in a session of
its own (a closed terminal's SIGHUP and Ctrl-C's SIGINT do not reach it), holding the read end
of a pipe whose only writer is the view. The guard blocks on it:

* one byte (``Guard.release``): the view stopped TensorBoard and removes the temp dir itself;
  the guard exits doing nothing;
* end of file without a byte: the view died. The guard SIGKILLs TensorBoard's whole process
  group, removes the temp dir (only a dir named ``ftrun-view-*``) and exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

TEMP_PREFIX = "ftrun-view-"


def guard(fd: int, pgid: int, root: Path) -> bool:
    """Wait on ``fd``; on end of file without a byte kill ``pgid`` and remove ``root``. Returns
    whether it did (the view died)."""
    while True:
        try:
            got = os.read(fd, 1)
            break
        except InterruptedError:
            continue
    if got:
        return False
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
    if root.name.startswith(TEMP_PREFIX):
        shutil.rmtree(root, ignore_errors=True)
    return True


class Guard:
    """The guard process of one TensorBoard (process group ``pgid``) and temp dir ``root``."""

    def __init__(self, pgid: int, root: Path) -> None:
        r, self._w = os.pipe()  # both close-on-exec: only the guard gets ``r`` (pass_fds)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(r), str(pgid), str(root)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(r,),
                start_new_session=True,
            )
        finally:
            os.close(r)

    def release(self) -> None:
        """The view ends TensorBoard and its temp dir itself: the guard exits doing nothing."""
        if self._w < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._w, b"x")
        os.close(self._w)
        self._w = -1
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # never seen; it must not hold the view's exit
            self.proc.kill()
            self.proc.wait()


def main(argv: list[str]) -> int:
    for s in (signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    guard(int(argv[0]), int(argv[1]), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
