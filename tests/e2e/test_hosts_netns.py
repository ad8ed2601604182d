"""Two hosts with separate network stacks: two network namespaces this test makes (a veth pair,
addresses only inside them, no route out), each with its own host name that resolves to
loopback on itself (a stock Debian/Ubuntu ``/etc/hosts``: ``127.0.1.1 host0``) and to the other
namespace's address on the other (``/etc/netns/NAME/hosts``, which ``ip netns exec`` mounts over
``/etc/hosts``). The README's "Several hosts" commands, as printed, run there: the lighthouse and
group 0 on host0, group 1 on host1, each in its own working directory; then both run dirs are
copied together and ``inspect-trace`` checks them as one job. Then the same with the lighthouse
killed mid-run: both groups fail within ``--quorum-timeout``, naming it.

Needs root, ``ip`` and ``unshare`` (skipped with the reason otherwise; CI runs as root).
About 40 s on 2 shared cores (two trainings of 60 and up to 400 steps).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from train_fixtures import FTRUN, ROOT, lighthouse_url

pytestmark = pytest.mark.e2e

QUORUM_TIMEOUT = 15


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for exe in ("ip", "unshare"):
        if shutil.which(exe) is None:
            return f"needs `{exe}`"
    return None


def readme_commands() -> list[tuple[str, str]]:
    """The README's "Several hosts" block: (host, command) per ``HOST$ ftrun ...`` line."""
    text = (ROOT / "docs" / "hosts.md").read_text()
    section = text[text.index("# Several hosts") :]
    block = section[section.index("```") + 3 :]
    block = block[: block.index("```")]
    out = []
    for ln in block.splitlines():
        m = re.match(r"^(\w+)\$\s+(ftrun .*?)\s*(#.*)?$", ln)
        if m:
            out.append((m[1], m[2]))
    return out


class Hosts:
    """host0 and host1: network namespaces joined by a veth pair (10.X.Y.1 and .2/24)."""

    def __init__(self, tmp: Path) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.ns = {h: f"ftrun-{self.tag}-{h}" for h in ("host0", "host1")}
        net = f"10.{random.randint(200, 250)}.{random.randint(1, 250)}"
        self.addr = {"host0": f"{net}.1", "host1": f"{net}.2"}
        self.tmp = tmp
        self.made: list[str] = []
        try:
            self._make()
        except subprocess.CalledProcessError as e:
            self.remove()
            pytest.skip(f"cannot make network namespaces here: {e.stderr.strip() if e.stderr else e}")

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)

    def _make(self) -> None:
        a, b = f"fa{self.tag}", f"fb{self.tag}"
        for ns in self.ns.values():
            self._ip("netns", "add", ns)
            self.made.append(ns)
        self._ip("link", "add", a, "type", "veth", "peer", "name", b)
        for dev, h in ((a, "host0"), (b, "host1")):
            ns = self.ns[h]
            self._ip("link", "set", dev, "netns", ns)
            self._ip("-n", ns, "addr", "add", f"{self.addr[h]}/24", "dev", dev)
            self._ip("-n", ns, "link", "set", dev, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            other = "host1" if h == "host0" else "host0"
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            # stock: this host's own name on 127.0.1.1; the other host's name from "DNS"
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {h}\n{self.addr[other]} {other}\n")
            (self.tmp / h).mkdir(exist_ok=True)

    def popen(self, host: str, argv: list[str], log: Path) -> subprocess.Popen:
        """``argv`` on ``host``: its namespace, its own host name (a UTS namespace), its own cwd."""
        wrapped = [
            "ip",
            "netns",
            "exec",
            self.ns[host],
            "unshare",
            "--uts",
            "sh",
            "-c",
            f'hostname {host} && exec "$@"',
            "sh",
            *argv,
        ]
        return subprocess.Popen(
            wrapped,
            cwd=self.tmp / host,
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            text=True,
            start_new_session=True,
        )

    def remove(self) -> None:
        for ns in self.made:
            subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for p in pids:
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)


@pytest.fixture
def hosts(tmp_path):
    why = _why_not()
    if why:
        pytest.skip(why)
    h = Hosts(tmp_path)
    yield h
    h.remove()


def ftrun_argv(command: str, *extra: str) -> list[str]:
    words = command.split()
    assert words[0] == "ftrun"
    return [*FTRUN, *words[1:], *extra]


def start_lighthouse(hosts: Hosts, command: str) -> tuple[subprocess.Popen, str]:
    lh = hosts.popen("host0", ftrun_argv(command), hosts.tmp / "lighthouse.log")
    return lh, lighthouse_url(lh, hosts.tmp / "lighthouse.log")


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGINT)
            p.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_readme_commands_on_two_hosts_then_one_inspection(hosts: Hosts) -> None:
    cmds = readme_commands()
    assert [h for h, _ in cmds] == ["host0", "host0", "host1", "any"], cmds
    t0 = time.monotonic()
    lh, url = start_lighthouse(hosts, cmds[0][1])
    assert url == "http://host0:29510"  # what the README's train lines use
    try:
        trains = [(h, hosts.popen(h, ftrun_argv(c), hosts.tmp / f"{h}.train.log")) for h, c in cmds[1:3]]
        outs = {}
        for h, p in trains:
            outs[h] = p.communicate(timeout=240)[0]
            assert p.returncode == 0, (h, outs[h], (hosts.tmp / f"{h}.train.log").read_text()[-3000:])
    finally:
        stop(lh)
    wall = time.monotonic() - t0
    # each group's run dir lives on its own host; copy them together, then the README's inspection
    anyh = hosts.tmp / "any"
    for h in ("host0", "host1"):
        for d in (hosts.tmp / h / "profiles").iterdir():
            shutil.copytree(d, anyh / "profiles" / d.name)
    words = cmds[3][1].split()
    r = subprocess.run([*FTRUN, *words[1:]], cwd=anyh, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(
        r"job job-\w+: 2 run dirs merged \(profiles/job1-group0, profiles/job1-group1\)", re.sub(r"\s+", " ", r.stdout)
    ), r.stdout
    assert re.search(r"fingerprints: replicas agreed after [1-9]\d* commit", r.stdout), r.stdout
    assert "PASS" in r.stdout.splitlines()[-1]
    # what each host recorded about how the other reaches it
    import json

    lh_log = (hosts.tmp / "lighthouse.log").read_text()
    for k, h in enumerate(("host0", "host1")):
        m = json.loads((hosts.tmp / h / "profiles" / f"job1-group{k}" / "manifest.json").read_text())
        net = m["network"]
        assert net["scope"] == "hosts" and net["address"] == hosts.addr[h], net
        assert net["interface"] == ("fa" if k == 0 else "fb") + hosts.tag
        assert net["env"] == {"GLOO_SOCKET_IFNAME": net["interface"], "NCCL_SOCKET_IFNAME": net["interface"]}
        assert f'store_address: "{hosts.addr[h]}:{net["store_port"]}"' in lh_log
    assert "localhost" not in re.sub(
        r"http://localhost:\d+/?", "", " ".join(re.findall(r'store_address: "[^"]*"', lh_log))
    )
    quorums = len(re.findall(r"Quorum! Quorum", lh_log))
    print(f"\ntwo namespaces: wall {wall:.1f} s, {quorums} quorums, verdict: {r.stdout.splitlines()[-1]}")


def test_lighthouse_killed_mid_run_fails_both_groups_naming_it(hosts: Hosts) -> None:
    cmds = readme_commands()
    lh, _ = start_lighthouse(hosts, cmds[0][1])
    extra = ["--steps", "2000", "--quorum-timeout", str(QUORUM_TIMEOUT), "--profile", "none"]
    trains = [(h, hosts.popen(h, ftrun_argv(c, *extra), hosts.tmp / f"{h}.train.log")) for h, c in cmds[1:3]]
    try:
        deadline = time.monotonic() + 120
        # mid-run: both groups in a quorum and committing (the lighthouse logs its quorums)
        while time.monotonic() < deadline:
            text = (hosts.tmp / "lighthouse.log").read_text(errors="replace")
            if len(re.findall(r"Quorum! Quorum", text)) >= 3:
                break
            assert all(p.poll() is None for _, p in trains), "a group ended before the lighthouse was killed"
            time.sleep(0.2)
        else:
            raise AssertionError("no quorums within 120 s")
        os.killpg(lh.pid, signal.SIGKILL)
        lh.wait()
        killed = time.monotonic()
        for h, p in trains:
            out = p.communicate(timeout=QUORUM_TIMEOUT + 90)[0]
            took = time.monotonic() - killed
            err = (hosts.tmp / f"{h}.train.log").read_text(errors="replace")
            assert p.returncode == 1, (h, p.returncode, out, err[-2000:])
            assert took < QUORUM_TIMEOUT + 30, (
                h,
                took,
            )  # the quorum timeout, plus the probe and shutdown (16 s measured)
            assert "http://host0:29510" in err.splitlines()[-1] and "lighthouse" in err.splitlines()[-1], err[-2000:]
            print(f"\n{h}: failed {took:.1f} s after the lighthouse was killed: {err.splitlines()[-1][:300]}")
    finally:
        for _, p in trains:
            stop(p)
        stop(lh)
