"""ftrun.launch.network: which address, interface and variables a replica group gets across
hosts, and the one-line refusals (unit: the host's interfaces, routes and name lookups faked)."""

from __future__ import annotations

import socket

import pytest

from ftrun.config import RunConfig
from ftrun.errors import BadInput
from ftrun.launch import network
from ftrun.launch.network import resolve

IFACES = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5"], "ib0": ["192.168.7.5"], "down0": []}
NAMES = {"head": "10.0.0.1", "me": "10.0.0.5", "selfname": "127.0.1.1", "localhost": "127.0.0.1"}


@pytest.fixture
def host(monkeypatch):
    """A host with eth0 (default route), ib0, lo; names resolved from NAMES; routes: to 10.0.0.x
    via eth0, to a loopback address via lo."""
    state = {"ifaces": dict(IFACES), "default": "eth0", "up": {"eth0", "ib0"}}
    monkeypatch.setattr(network, "interfaces", lambda: state["ifaces"])
    monkeypatch.setattr(network, "default_route_interface", lambda: state["default"])
    monkeypatch.setattr(network, "is_up", lambda n: n in state["up"])

    def getaddrinfo(host, port, *a, **k):
        h = NAMES.get(host, host)
        try:
            socket.inet_aton(h)
        except OSError:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None
        return [(socket.AF_INET, socket.SOCK_DGRAM, 0, "", (h, port or 0))]

    real_route_source = network.route_source

    def route_source(host, port):
        try:
            h = getaddrinfo(host, port)[0][4][0]
        except socket.gaierror:
            return real_route_source(host, port)  # its one-line refusal (the lookup is faked too)
        return "127.0.0.1" if h.startswith("127.") else ("10.0.0.5" if h.startswith("10.0.0.") else "192.168.7.5")

    monkeypatch.setattr(network.socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(network, "route_source", route_source)
    return state


def cfg(**kw) -> RunConfig:
    return RunConfig.from_keys(**{"lighthouse": "http://head:29510", "replica_group_id": 1, "replicas": 2, **kw})


def test_loopback_lighthouse_keeps_everything_local(host) -> None:
    n = resolve(cfg(lighthouse="http://127.0.0.1:29510"), {})
    assert (n.scope, n.address, n.interface, n.env) == ("loopback", "localhost", None, {})
    assert resolve(RunConfig(), {}).scope == "loopback"  # no --lighthouse: ftrun's own, on loopback


def test_the_interface_that_routes_to_the_lighthouse(host) -> None:
    n = resolve(cfg(), {})
    assert (n.scope, n.address, n.interface, n.advertise_host) == ("hosts", "10.0.0.5", "eth0", "10.0.0.5")
    assert n.env == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}
    assert n.found == "the route to the lighthouse" and n.env_from_user == []


def test_a_route_through_another_interface_wins_over_the_default_route(host) -> None:
    n = resolve(cfg(lighthouse="http://192.168.7.1:29510"), {})
    assert (n.address, n.interface) == ("192.168.7.5", "ib0")


def test_the_users_variables_are_kept_and_recorded(host) -> None:
    n = resolve(cfg(), {"NCCL_SOCKET_IFNAME": "ib"})
    assert n.env == {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "ib"} and n.env_from_user == [
        "NCCL_SOCKET_IFNAME"
    ]
    n = resolve(cfg(), {"GLOO_SOCKET_IFNAME": "ib0"})  # the user's Gloo interface also picks the address
    assert (n.address, n.interface, n.found) == ("192.168.7.5", "ib0", "GLOO_SOCKET_IFNAME")


def test_lighthouse_on_this_host_under_a_loopback_name(host) -> None:
    """Stock /etc/hosts: the lighthouse host's own name is 127.0.1.1 there; the group still
    gets the address the other hosts reach (the default route's interface)."""
    n = resolve(cfg(lighthouse="http://selfname:29510"), {})
    assert (n.scope, n.address, n.interface) == ("hosts", "10.0.0.5", "eth0")
    assert "default route" in n.found
    host["default"] = None
    host["up"] = {"eth0"}
    n = resolve(cfg(lighthouse="http://selfname:29510"), {})
    assert (n.address, n.interface) == ("10.0.0.5", "eth0") and "only interface" in n.found
    host["up"] = {"eth0", "ib0"}
    with pytest.raises(
        BadInput, match=r"selfname resolves to loopback on this host .*eth0 \(10.0.0.5\), ib0 .*--interface"
    ):
        resolve(cfg(lighthouse="http://selfname:29510"), {})


@pytest.mark.parametrize(
    "kw, env, needle",
    [
        (
            {"master_addr": "127.0.0.1"},
            {},
            r"^--master-addr 127.0.0.1: loopback, but the lighthouse http://head:29510 is not",
        ),
        ({"master_addr": "localhost"}, {}, r"^--master-addr localhost: loopback"),
        ({"master_addr": "10.9.9.9"}, {}, r"^--master-addr 10.9.9.9: 10.9.9.9 is no address of this host"),
        ({"master_addr": "nosuch"}, {}, r"^--master-addr nosuch: does not resolve on this host"),
        ({"advertise_host": "localhost"}, {}, r"^--advertise-host localhost: loopback on this host"),
        ({"advertise_host": "selfname"}, {}, r"^--advertise-host selfname: loopback on this host"),
        ({"advertise_host": "nosuch"}, {}, r"^--advertise-host nosuch: does not resolve on this host"),
        (
            {"interface": "eth9"},
            {},
            r"^--interface eth9: no such interface on this host \(interfaces: lo, eth0, ib0, down0\)",
        ),
        ({"interface": "down0"}, {}, r"^--interface down0: the interface has no address"),
        ({}, {"GLOO_SOCKET_IFNAME": "eth0,eth7"}, r"^GLOO_SOCKET_IFNAME=eth0,eth7: no interface 'eth7'"),
        ({}, {"NCCL_SOCKET_IFNAME": "=eth"}, r"^NCCL_SOCKET_IFNAME==eth: no interface 'eth'"),
        ({}, {"NCCL_SOCKET_IFNAME": "en"}, r"^NCCL_SOCKET_IFNAME=en: no interface 'en'"),
        ({"lighthouse": "http://nosuchhead:29510"}, {}, r"^--lighthouse: host 'nosuchhead' does not resolve"),
    ],
)
def test_what_other_hosts_could_not_reach_is_refused_in_one_line(host, kw, env, needle) -> None:
    with pytest.raises(BadInput, match=needle) as e:
        resolve(cfg(**kw), env)
    assert "\n" not in str(e.value)


def test_pinned_values_win(host) -> None:
    n = resolve(cfg(master_addr="me", advertise_host="me", interface="ib0"), {"NCCL_SOCKET_IFNAME": "^docker"})
    assert (n.address, n.interface, n.advertise_host, n.found) == ("me", "eth0", "me", "--master-addr")
    n = resolve(cfg(interface="ib0"), {})
    assert (n.address, n.interface, n.found) == ("192.168.7.5", "ib0", "--interface")
    assert resolve(cfg(advertise_host="head"), {}).advertise_host == "head"


def test_this_hosts_real_interfaces_are_read() -> None:
    ifaces = network.interfaces()
    assert "lo" in ifaces and "127.0.0.1" in ifaces["lo"]
    assert network.is_loopback("127.0.1.1") and network.is_loopback("[::1]") and not network.is_loopback("10.0.0.1")
    assert network.route_source("127.0.0.1", 9) == "127.0.0.1"  # a UDP connect: nothing sent


def test_torchft_advertises_the_address_in_its_own_modules_only() -> None:
    from ftrun import torchft_compat

    changed = torchft_compat.advertise_as("10.1.2.3")
    import torchft.checkpointing.http_transport as ht
    import torchft.process_group as pg

    try:
        assert "torchft.checkpointing.http_transport" in changed and all(n.startswith("torchft") for n in changed)
        assert ht.socket.gethostname() == "10.1.2.3" and ht.socket.AF_INET == socket.AF_INET
        assert getattr(pg, "socket", socket) in (socket, ht.socket)  # nightly: its rendezvous store too
        assert socket.gethostname() != "10.1.2.3"  # this process's socket module is untouched
    finally:
        for name in changed:
            import sys

            sys.modules[name].socket = socket


def test_the_store_is_on_the_found_address_across_hosts_and_standalone_locally() -> None:
    from ftrun.launch.run import store_address
    from ftrun.layout import Network

    local = Network(scope="loopback", address="localhost", interface=None, advertise_host="localhost", found="x")
    assert store_address(local, RunConfig()) is None and local.store_port is None  # torchrun --standalone
    assert store_address(local, RunConfig.from_keys(master_port=29600)) == ("127.0.0.1", 29600)
    hosts = Network(scope="hosts", address="127.0.0.1", interface="lo", advertise_host="127.0.0.1", found="x")
    addr, port = store_address(hosts, RunConfig())
    assert addr == "127.0.0.1" and port == hosts.store_port and port > 0  # a free port, recorded
    assert store_address(hosts, RunConfig.from_keys(master_port=29601)) == ("127.0.0.1", 29601)
