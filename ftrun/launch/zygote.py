"""Replica groups' agents forked from a pre-imported zygote (``ftrun.worker.zygote``). Torch-free.

``ftrun sweep`` starts one zygote for the sweep (``start``) and hands its address to every
cell's ``ftrun train`` in ``ENV_ZYGOTE``; any other ``ftrun train`` holds one for its groups, its
spares and relaunches, and a trained ``compare`` one for its trainings, which run in its own
process (``shared_imports``). There, ``ftrun.launch.groups.Group.start`` asks it to
fork each group's agent (``fork_agent``) instead of starting a fresh interpreter that imports
torch again. Each cell is still its own run: an agent forked for it has its own session and
process group, the cell's environment and log, and carries nothing from another cell's (the
zygote forks every one from the state it had after its imports).

``ForkedAgent`` stands for such an agent where a ``subprocess.Popen`` stands for a spawned one
(``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``): the zygote is its parent and
reaps it, and tells this process its exit status over the connection. Stopping it works as for
any group (``ftrun.launch.procs.stop_tree`` signals the tree by pid). This process ending, even
by SIGKILL, closes the connection, and the zygote kills the agents it forked for it.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import msgspec

from ftrun.launch.procs import alive
from ftrun.parent_death import die_with_this_process
from ftrun.worker.zygote import ForkRequest, Reply, agent_args

ENV_ZYGOTE = "FTRUN_ZYGOTE"  # "PID:PATH": the zygote (its pid, its socket) this process's agents fork from
CONNECT_WAIT_S = 120.0  # how long a train waits for a starting zygote's imports (it gives up at once if it died)
ACK_WAIT_S = 30.0  # a fork request's answer (a fork: milliseconds)
POLL_S = 0.02


@dataclass
class Server:
    """A running zygote: its process, its socket's path, the private folder that holds it."""

    proc: subprocess.Popen
    path: Path
    folder: Path

    @property
    def address(self) -> str:
        """``ENV_ZYGOTE``'s value for a process whose agents it forks."""
        return f"{self.proc.pid}:{self.path}"

    def stop(self) -> None:
        """SIGTERM (it stops any agent still running), wait, SIGKILL if it hangs; remove its folder."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def usable() -> bool:
    """Agents are forked here at all (``ftrun.worker.agent.fork_safe``: Linux, torch without CUDA/ROCm)."""
    from ftrun.worker.agent import fork_safe

    return fork_safe()


def start(log: IO[bytes] | int) -> Server:
    """Start a zygote (its output to ``log``), its socket in a new private temporary folder (a
    short path: a Unix socket's is limited). It dies with this process's calling thread
    (``die_with_this_process``): start it from a thread that lives as long as it is needed."""
    folder = Path(tempfile.mkdtemp(prefix="ftrun-zygote-"))
    path = folder / "sock"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ftrun.worker.zygote", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_this_process(signal.SIGTERM),
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Server(proc, path, folder)


@dataclass
class Lazy:
    """``shared_imports``' zygote: where it writes its output, the zygote once the first group started it."""

    log: Path | None
    server: Server | None = None


_lazy: list[Lazy] = []  # within ``shared_imports`` (never nested: one at most)


@contextmanager
def shared_imports(log: Path | None = None) -> Iterator[None]:
    """Within: the agents of this process's trainings (one ``ftrun train``'s groups, spares and
    relaunches; ``ftrun compare``'s trainings, one after another, in this process) forked by one
    zygote, started when the first group starts (``fork_agent``; its ``ENV_ZYGOTE`` set from then
    on) and stopped at the end, whatever ends it. Nothing where agents are not forked, a zygote
    is set already (a sweep's cell), or within another ``shared_imports`` (compare's training).
    ``log``: the zygote's output (appended; None: discarded)."""
    if not usable() or os.environ.get(ENV_ZYGOTE) or _lazy:
        yield
        return
    _lazy.append(Lazy(log))
    try:
        yield
    finally:
        server = _lazy.pop().server
        if server is not None:
            os.environ.pop(ENV_ZYGOTE, None)
            while _client:  # closed first: the zygote kills what it still runs for us, then ends
                c = _client.pop()
                if c is not None:
                    c.close()
            server.stop()


def parse_address(value: str) -> tuple[int, Path] | None:
    """``ENV_ZYGOTE``'s "PID:PATH" (None when malformed)."""
    pid, sep, path = value.partition(":")
    return (int(pid), Path(path)) if sep and pid.isdigit() and path else None


@dataclass
class ForkedAgent:
    """A group's agent forked by the zygote, used as a ``subprocess.Popen`` of it is."""

    pid: int
    args: list[str]
    client: Client = field(repr=False, compare=False)
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.client.pump(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = POLL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.client.pump(left)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass
class Client:
    """One connection to the zygote: fork requests out, acknowledgements and exit statuses in."""

    sock: socket.socket
    buf: bytes = b""
    acks: list[Reply] = field(default_factory=list)
    agents: dict[int, ForkedAgent] = field(default_factory=dict)
    gone: bool = False  # the connection closed: exits are then read from /proc
    lock: threading.RLock = field(default_factory=threading.RLock)

    def fork(self, argv: list[str], env: dict[str, str], log: Path, cwd: Path | None) -> ForkedAgent | None:
        """The agent ``argv`` forked by the zygote, or None (the zygote is gone or refused: start
        it as usual)."""
        req = ForkRequest(argv=list(argv), env=dict(env), log=str(log), cwd=None if cwd is None else str(cwd))
        with self.lock:
            try:
                self.sock.sendall(msgspec.json.encode(req) + b"\n")
            except OSError:
                self.gone = True
                return None
            deadline = time.monotonic() + ACK_WAIT_S
            while not self.acks and not self.gone and time.monotonic() < deadline:
                self.pump(deadline - time.monotonic())
            if not self.acks:  # no answer: closing kills whatever it may still fork for us
                self.close()
                return None
            ack = self.acks.pop(0)
            if not ack.pid:
                return None
            agent = ForkedAgent(ack.pid, list(argv), self)
            self.agents[ack.pid] = agent
            return agent

    def pump(self, timeout: float) -> None:
        """Read what the zygote sent within ``timeout`` s; once gone, an agent no longer alive has ended."""
        with self.lock:
            if self.gone:
                running = [a for a in self.agents.values() if a.returncode is None]
                for a in running:
                    if not alive(a.pid):
                        a.returncode = -signal.SIGTERM  # (its parent-death signal: the zygote died)
                if timeout > 0 and any(a.returncode is None for a in running):
                    time.sleep(min(timeout, POLL_S))  # (a waiter's pace: it looks again)
                return
            ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
            if not ready:
                return
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                self.gone = True
                return
            *lines, self.buf = (self.buf + data).split(b"\n")
            for line in lines:
                if line.strip():
                    self.take(msgspec.json.decode(line, type=Reply))

    def take(self, reply: Reply) -> None:
        if reply.code is None:
            self.acks.append(reply)
        elif reply.pid in self.agents:
            self.agents[reply.pid].returncode = reply.code

    def close(self) -> None:
        with self.lock:
            self.gone = True
            self.sock.close()


def connect(value: str, wait_s: float = CONNECT_WAIT_S) -> Client | None:
    """A connection to the zygote ``value`` names (``ENV_ZYGOTE``), waiting while it imports;
    None when the value is malformed, the zygote died or does not listen within ``wait_s``."""
    found = parse_address(value)
    if found is None:
        return None
    pid, path = found
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and alive(pid):
        if path.exists():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(path))
            except OSError:
                s.close()
                return None
            return Client(s)
        time.sleep(POLL_S)
    return None


_client: list[Client | None] = []  # this process's connection, made at its first fork (one try)


def _start_logged(log: Path | None) -> Server:
    """``start``, its output appended to ``log`` (None: discarded)."""
    if log is None:
        return start(subprocess.DEVNULL)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return start(out)


def fork_agent(argv: list[str], env: dict[str, str], log: Path, cwd: Path | None) -> ForkedAgent | None:
    """The group's agent forked by this process's zygote (``ENV_ZYGOTE``), when there is one and
    ``argv`` runs ftrun's agent; None: start it as usual (``ftrun.launch.procs.spawn``)."""
    if agent_args(argv) is None:
        return None
    if _lazy and _lazy[-1].server is None and not os.environ.get(ENV_ZYGOTE):  # shared_imports': its first group
        _lazy[-1].server = server = _start_logged(_lazy[-1].log)
        os.environ[ENV_ZYGOTE] = server.address
    value = os.environ.get(ENV_ZYGOTE)
    if not value:
        return None
    if not _client:
        _client.append(connect(value))
    client = _client[0]
    # the working directory it would inherit from this process, as a spawned one does
    return None if client is None or client.gone else client.fork(argv, env, log, cwd or Path.cwd())
