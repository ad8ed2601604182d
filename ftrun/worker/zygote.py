"""A pre-imported parent that forks replica groups' agents: ``python -m ftrun.worker.zygote PATH``.

``ftrun sweep`` runs one for the whole sweep, a trained ``compare`` one for its trainings, any
other ``ftrun train`` one for its groups (``ftrun.launch.zygote``): it imports once
what an agent and its ranks import (``ftrun.worker.agent.preimport``: torch, torchft, ftrun's
worker; nothing stateful), then listens on the Unix socket ``PATH`` (bound under a temporary
name and renamed: the path exists once it accepts). Each cell's ``ftrun train`` connects and
asks it to fork its groups' agents (``ForkRequest``, one JSON line each); a forked agent is
what ``python -m ftrun.worker.agent ARGS`` would be in a fresh interpreter, without paying the
imports: its own session and process group, the train's environment, working directory and
log as stdout/stderr, a fresh interpreter's signal dispositions, and nothing else of the
zygote's (which never runs an agent itself: each child forks from the same pristine state).

Contract, per connection (one ``ftrun train``): a request is answered by ``Reply(pid)`` (or
``Reply(pid=0, error)``); when that agent ends, by ``Reply(pid, code)`` with ``code`` as
``subprocess.Popen.returncode`` spells it (negative: killed by that signal). The zygote reaps
every agent. Its requester gone (the connection closed: ``ftrun train`` ended or was killed),
its agents still running get SIGKILL, process group and all (their forked ranks share it).
The zygote ended (SIGTERM, SIGINT, SIGHUP: SIGTERM to every agent's process group, SIGKILL
after ``STOP_GRACE_S``; it then removes ``PATH`` and, once empty, its folder) or killed: each
agent gets SIGTERM as its parent-death signal, as a group launched by
``ftrun.launch.procs.spawn`` does when ``ftrun train`` dies.
Torch-free at import (the server imports torch when it runs).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

import msgspec

STOP_GRACE_S = 3.0  # a stopped zygote's agents: SIGTERM, then SIGKILL this much later


class ForkRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Fork an agent: ``argv`` as ``ftrun.launch.groups`` builds it (``[python, -m,
    ftrun.worker.agent, TORCHRUN-ARGS...]``), its whole environment, working directory (None:
    the zygote's) and the log file its stdout and stderr append to."""

    argv: list[str]
    env: dict[str, str]
    log: str
    cwd: str | None = None


class Reply(msgspec.Struct, omit_defaults=True):
    """``pid`` forked (``code`` None), ``pid`` ended with ``code``, or no fork (``pid`` 0, ``error``)."""

    pid: int
    code: int | None = None
    error: str | None = None


AGENT_ARGV = ("-m", "ftrun.worker.agent")  # argv[1:3] of every request the zygote runs


def agent_args(argv: list[str]) -> list[str] | None:
    """The agent's own arguments (torchrun's) when ``argv`` runs ``ftrun.worker.agent``, else None."""
    return argv[3:] if len(argv) >= 3 and tuple(argv[1:3]) == AGENT_ARGV else None


def returncode(status: int) -> int:
    """A ``waitpid`` status as ``subprocess.Popen.returncode`` spells it."""
    return os.waitstatus_to_exitcode(status)


def _redirect(log: str) -> None:
    """stdin from /dev/null, stdout and stderr appended to ``log`` (as ``spawn`` starts a group)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


def _agent(req: ForkRequest, zygote: int, keep: list[socket.socket]) -> None:
    """The forked child: become the agent ``req`` asks for, run it, end the process."""
    from ftrun.parent_death import set_parent_death_signal
    from ftrun.worker import agent
    from ftrun.worker.forked_rank import _died, _exit_now, as_fresh

    try:
        signal.set_wakeup_fd(-1)
        as_fresh()  # first: the zygote's handlers must not catch a signal meant for the agent
        for s in keep:  # the zygote's sockets: a requester's EOF must not wait for this child
            s.close()
        os.setsid()  # its own session and process group, as spawn's start_new_session
        set_parent_death_signal(signal.SIGTERM, zygote)
        _redirect(req.log)
        if req.cwd is not None:
            os.chdir(req.cwd)
        os.environ.clear()
        os.environ.update(req.env)
        sys.argv = [agent.__file__, *(agent_args(req.argv) or [])]
        agent.main()  # ends the process with 0 on success
    except BaseException as e:  # every end is a process end here, reported as the interpreter would
        _died(e)
    _exit_now(0)


class Zygote:
    """The server's state: its listening socket, its requesters and the agents each one owns."""

    def __init__(self, listener: socket.socket, wakeup: list[socket.socket]) -> None:
        self.listener = listener
        self.wakeup = wakeup  # the signal wake-up pair: [read end, write end]
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ)
        self.bufs: dict[socket.socket, bytes] = {}
        self.owner: dict[int, socket.socket] = {}  # live agent pid -> its requester
        self.stopping = False

    def fork(self, conn: socket.socket, line: bytes) -> None:
        try:
            req = msgspec.json.decode(line, type=ForkRequest)
        except msgspec.DecodeError as e:
            return self.send(conn, Reply(0, error=f"bad request: {e}"))
        if agent_args(req.argv) is None:
            return self.send(conn, Reply(0, error=f"not an ftrun agent: {req.argv[:3]}"))
        sys.stdout.flush()
        sys.stderr.flush()
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            _agent(req, me, [self.listener, *self.wakeup, *self.bufs])
        self.owner[pid] = conn
        self.send(conn, Reply(pid))

    def send(self, conn: socket.socket, reply: Reply) -> None:
        try:
            conn.sendall(msgspec.json.encode(reply) + b"\n")
        except OSError:  # the requester is gone: its EOF is handled where it is read
            pass

    def read(self, conn: socket.socket) -> None:
        data = conn.recv(1 << 16)
        if not data:
            return self.drop(conn)
        buf = self.bufs[conn] + data
        *lines, self.bufs[conn] = buf.split(b"\n")
        for line in lines:
            if line.strip():
                self.fork(conn, line)

    def drop(self, conn: socket.socket) -> None:
        """The requester is gone: its agents still running die with it."""
        for pid, owner in list(self.owner.items()):
            if owner is conn:
                _kill_group(pid, signal.SIGKILL)
        self.sel.unregister(conn)
        self.bufs.pop(conn, None)
        conn.close()

    def reap(self) -> None:
        while self.owner:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.owner.pop(pid, None)
            if conn is not None and conn in self.bufs:
                self.send(conn, Reply(pid, code=returncode(status)))

    def serve(self) -> None:
        wakeup = self.wakeup[0]
        self.sel.register(wakeup, selectors.EVENT_READ)
        while not self.stopping:
            for key, _ in self.sel.select(timeout=1.0):
                s = key.fileobj
                if s is self.listener:
                    conn, _ = self.listener.accept()
                    self.bufs[conn] = b""
                    self.sel.register(conn, selectors.EVENT_READ)
                elif s is wakeup:
                    wakeup.recv(4096)  # SIGCHLD or a stop: handled below
                else:
                    assert isinstance(s, socket.socket)
                    self.read(s)
            self.reap()
        self.stop_agents()

    def stop_agents(self) -> None:
        """SIGTERM every live agent's process group, SIGKILL after ``STOP_GRACE_S``, reap them."""
        for pid in self.owner:
            _kill_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while self.owner and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.01)
        for pid in self.owner:
            _kill_group(pid, signal.SIGKILL)
        while self.owner:
            pid, _ = os.waitpid(-1, 0)
            self.owner.pop(pid, None)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the agent leads its own group (setsid)
    except (ProcessLookupError, PermissionError):
        pass


def listen(path: Path) -> socket.socket:
    """A Unix socket listening at ``path``, bound under a temporary name first: ``path`` appears
    only once connections are accepted."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(tmp))
    s.listen(16)
    os.replace(tmp, path)
    return s


def main(path: str) -> None:
    from ftrun.worker.agent import preimport

    preimport()  # a stopping signal meanwhile ends it at once: no agent yet
    import torch.distributed.run  # noqa: F401  (what the agent itself imports)

    pair = list(socket.socketpair())
    for s in pair:
        s.setblocking(False)
    z = Zygote(listen(Path(path)), pair)

    def stop(*_: object) -> None:
        z.stopping = True

    signal.set_wakeup_fd(pair[1].fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select (the wakeup fd) to reap
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        z.serve()
    finally:  # its socket and the private folder that holds it (``ftrun.launch.zygote.start``'s),
        # even when its starter cannot remove them (a SIGKILLed sweep: this ends by its parent-death signal)
        Path(path).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            Path(path).parent.rmdir()  # (only once empty)
    # nothing is left to run (every agent reaped, the socket gone): end without the interpreter's
    # teardown of torch, most of a second that a training's end would wait on (``Server.stop``)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
