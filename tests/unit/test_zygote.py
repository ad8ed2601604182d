"""The zygote that forks groups' agents (``ftrun.worker.zygote``) and its client
(``ftrun.launch.zygote``), over socket pairs: no process is started (the server's fork, waitpid
and kills are replaced)."""

from __future__ import annotations

import signal
import socket
import subprocess

import msgspec
import pytest

from ftrun.launch import zygote as client
from ftrun.worker import zygote as server

AGENT = ["/usr/bin/python3", "-m", "ftrun.worker.agent", "--standalone", "-m", "ftrun.worker.main", "spec.json"]


def _lines(sock: socket.socket) -> list[bytes]:
    sock.settimeout(1.0)
    data = b""
    while not data.endswith(b"\n"):
        data += sock.recv(1 << 16)
    return [x for x in data.split(b"\n") if x]


def _send(sock: socket.socket, *replies: server.Reply) -> None:
    sock.sendall(b"".join(msgspec.json.encode(r) + b"\n" for r in replies))


def test_only_ftrun_agents_are_forked_and_exit_statuses_read_as_popen_does():
    assert server.agent_args(AGENT) == AGENT[3:]
    assert server.agent_args(["python", "-m", "torch.distributed.run", "x.py"]) is None
    assert server.agent_args(["python"]) is None
    assert server.returncode(3 << 8) == 3  # exit(3)
    assert server.returncode(signal.SIGKILL) == -signal.SIGKILL  # killed
    assert client.parse_address("42:/tmp/ftrun-zygote-x/sock") == (42, client.Path("/tmp/ftrun-zygote-x/sock"))
    assert client.parse_address("/tmp/sock") is None and client.parse_address("x:/tmp/sock") is None


def test_a_forked_agent_is_a_popen_to_its_train(tmp_path):
    ours, zyg = socket.socketpair()
    c = client.Client(ours)
    _send(zyg, server.Reply(101))  # the acknowledgement, already waiting
    agent = c.fork(AGENT, {"A": "1"}, tmp_path / "replica0.log", None)
    assert agent is not None and agent.pid == 101
    (req,) = _lines(zyg)
    sent = msgspec.json.decode(req, type=server.ForkRequest)
    assert (sent.argv, sent.env, sent.log, sent.cwd) == (AGENT, {"A": "1"}, str(tmp_path / "replica0.log"), None)
    assert agent.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        agent.wait(timeout=0.05)
    _send(zyg, server.Reply(999, code=0), server.Reply(101, code=-signal.SIGTERM))  # another's exit, then its own
    assert agent.wait(timeout=1.0) == -signal.SIGTERM and agent.returncode == -signal.SIGTERM
    _send(zyg, server.Reply(0, error="not an ftrun agent"))
    assert c.fork(AGENT, {}, tmp_path / "x.log", tmp_path) is None  # refused: the caller spawns it


def test_once_the_zygote_is_gone_an_agent_has_ended_when_its_pid_is(tmp_path, monkeypatch):
    ours, zyg = socket.socketpair()
    c = client.Client(ours)
    _send(zyg, server.Reply(7))
    agent = c.fork(AGENT, {}, tmp_path / "r.log", None)
    assert agent is not None
    zyg.close()
    alive = {7: True}
    monkeypatch.setattr(client, "alive", lambda pid: alive[pid])
    assert agent.poll() is None and c.gone  # its parent-death signal is on its way
    alive[7] = False
    assert agent.poll() == -signal.SIGTERM
    assert c.fork(AGENT, {}, tmp_path / "r.log", None) is None  # no zygote: spawned as usual


def test_no_zygote_no_fork(tmp_path, monkeypatch):
    monkeypatch.delenv(client.ENV_ZYGOTE, raising=False)
    assert client.fork_agent(AGENT, {}, tmp_path / "r.log", None) is None
    monkeypatch.setenv(client.ENV_ZYGOTE, "1:/nonexistent/sock")
    assert client.fork_agent(["python", "-m", "torch.distributed.run", "x.py"], {}, tmp_path / "r.log", None) is None
    assert client.connect("not an address") is None


class _Server:
    """A ``server.Zygote`` whose fork, waitpid and kills are recorded, not done."""

    def __init__(self, monkeypatch) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.z = server.Zygote(self.listener, list(socket.socketpair()))
        self.pids = iter(range(500, 600))
        self.killed: list[tuple[int, int]] = []
        self.exited: list[tuple[int, int]] = []
        monkeypatch.setattr(server.os, "fork", lambda: next(self.pids))
        monkeypatch.setattr(server, "_kill_group", lambda pid, sig: self.killed.append((pid, sig)))
        monkeypatch.setattr(server.os, "waitpid", lambda *_: self.exited.pop(0) if self.exited else (0, 0))

    def connect(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        self.z.bufs[theirs] = b""
        self.z.sel.register(theirs, server.selectors.EVENT_READ)
        return ours


def test_the_server_forks_per_request_reports_exits_and_kills_an_ended_requesters_agents(monkeypatch):
    s = _Server(monkeypatch)
    a, b = s.connect(), s.connect()
    conn_a, conn_b = list(s.z.bufs)
    req = msgspec.json.encode(server.ForkRequest(argv=AGENT, env={}, log="/dev/null"))
    a.sendall(req + b"\n" + req[:10])  # one whole request, the start of another
    s.z.read(conn_a)
    assert [msgspec.json.decode(x, type=server.Reply) for x in _lines(a)] == [server.Reply(500)]
    a.sendall(req[10:] + b"\n")
    s.z.read(conn_a)
    b.sendall(b'{"argv": ["python", "x.py"], "env": {}, "log": "l"}\n' + b"not json\n")
    s.z.read(conn_b)
    refusals = [msgspec.json.decode(x, type=server.Reply) for x in _lines(b)]
    assert [r.pid for r in refusals] == [0, 0] and all(r.error for r in refusals)
    b.sendall(req + b"\n")
    s.z.read(conn_b)
    assert s.z.owner == {500: conn_a, 501: conn_a, 502: conn_b}
    s.exited = [(500, 2 << 8)]  # exit 2
    s.z.reap()
    assert msgspec.json.decode(_lines(a)[-1], type=server.Reply) == server.Reply(500, code=2)
    a.close()  # its train ended (or was killed): its agent still running dies, b's does not
    s.z.read(conn_a)
    assert s.killed == [(501, signal.SIGKILL)] and conn_a not in s.z.bufs


def test_the_sweep_hands_its_zygote_to_each_training_and_stops_it(tmp_path, monkeypatch):
    from ftrun import grid
    from ftrun.config import build
    from ftrun.sweep import runner as sw

    envs: list[dict[str, str]] = []

    class Popen:
        def __init__(self, cmd, env, **_kw) -> None:
            envs.append(env)
            self.pid, self.returncode = 0, 0

        def communicate(self):
            return "", ""

        def poll(self) -> int:
            return 0

        def wait(self, timeout=None) -> int:
            return 0

    class Server:
        address = "77:/tmp/ftrun-zygote-x/sock"
        stopped = 0

        def stop(self) -> None:
            Server.stopped += 1

    monkeypatch.setattr(sw.subprocess, "Popen", Popen)
    monkeypatch.setattr(sw, "_start_zygote", lambda _dir: Server())
    cells = grid.product([grid.Axis("seed", (1, 2))])
    for c in cells:
        c.config = build(seed=c.params["seed"], steps=8, profile="none", out=str(tmp_path), run_name=c.name)
    (tmp_path / sw.CELLS).mkdir()
    assert sw.Runner(tmp_path, None).zygote is None  # (a sweep with no cell to run)
    runner = sw.Runner(tmp_path, cells, share_imports=True)
    runner.train(cells[0])
    assert [e[client.ENV_ZYGOTE] for e in envs] == [Server.address] * 2  # the cell and its parked successor
    runner.stop()
    runner.close()
    assert Server.stopped == 1 and runner.zygote is None


def test_compare_shares_one_zygote_among_its_trainings_and_stops_it(tmp_path, monkeypatch):
    import os

    class Server:
        address = "88:/tmp/ftrun-zygote-y/sock"
        started = stopped = 0

        def __init__(self) -> None:
            Server.started += 1

        def stop(self) -> None:
            Server.stopped += 1

    ours, zyg = socket.socketpair()
    monkeypatch.setattr(client, "usable", lambda: True)
    monkeypatch.setattr(client, "start", lambda _log: Server())
    monkeypatch.setattr(client, "connect", lambda value: client.Client(ours) if value == Server.address else None)
    monkeypatch.delenv(client.ENV_ZYGOTE, raising=False)
    with client.shared_imports():  # trainings that start no group (a failed config): no zygote
        pass
    assert Server.started == 0
    with pytest.raises(KeyboardInterrupt), client.shared_imports():
        _send(zyg, server.Reply(5))
        assert client.fork_agent(AGENT, {}, tmp_path / "r.log", None).pid == 5  # started at the first group
        assert os.environ[client.ENV_ZYGOTE] == Server.address
        _send(zyg, server.Reply(6))
        assert client.fork_agent(AGENT, {}, tmp_path / "r.log", None).pid == 6  # the same one, connected once
        raise KeyboardInterrupt  # Ctrl-C in a training: stopped all the same
    assert (Server.started, Server.stopped) == (1, 1) and client.ENV_ZYGOTE not in os.environ
    assert client._client == [] and client._lazy == []
    assert zyg.recv(1 << 16).count(b"\n") == 2 and zyg.recv(1) == b""  # two requests, then closed
    monkeypatch.setenv(client.ENV_ZYGOTE, "1:/tmp/sock")  # a sweep's already: not replaced
    with client.shared_imports():
        assert client._lazy == []
