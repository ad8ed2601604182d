"""``--native-store HOST:PORT`` (``--backend gloo-native`` across hosts): the config's rules, who
hosts the bootstrap store (``ftrun.launch.native_store``) and what each host refuses before it
starts anything, on a faked host (``test_network``'s: names from its table, nothing resolved)."""

from __future__ import annotations

import socket

import pytest
from test_network import host  # noqa: F401  (the fixture)

from ftrun.config import RunConfig, build
from ftrun.errors import BadInput
from ftrun.launch import native_store
from ftrun.layout import Network

HOSTS = Network(scope="hosts", address="10.0.0.5", interface="eth0", advertise_host="10.0.0.5", found="test")
LOOPBACK = Network(scope="loopback", address="localhost", interface=None, advertise_host="localhost", found="test")


def cfg(group: int = 1, **kw) -> RunConfig:
    """A checked config (``ftrun.config.build``): group ``group`` of 2 across hosts, on gloo-native."""
    keys = {"lighthouse": "http://head:29510", "replica_group_id": group, "replicas": 2, "backend": "gloo-native"}
    return build(**{**keys, **kw})


def test_across_hosts_a_native_group_needs_the_store_named() -> None:
    with pytest.raises(BadInput, match=r"^--backend gloo-native: across hosts .* needs --native-store HOST:PORT"):
        cfg()
    cfg(native_store="head:29520")  # given: fine
    build(backend="gloo-native")  # every group here: this ftrun's store, on a free port


@pytest.mark.parametrize("value", ["head", "head:0", "head:x", ":29520", "head:65536"])
def test_a_store_that_is_no_host_and_port_is_refused(value) -> None:
    with pytest.raises(BadInput, match=rf"^--native-store {value}: expected HOST:PORT"):
        cfg(native_store=value)


def test_the_store_is_refused_for_torchfts_own_groups() -> None:
    with pytest.raises(BadInput, match=r"^--native-store head:29520: only for --backend gloo-native"):
        cfg(backend="gloo", native_store="head:29520")


def test_group_0_or_the_ftrun_of_every_group_hosts_it() -> None:
    assert native_store.hosts_it(cfg(0, native_store="head:1"))
    assert native_store.hosts_it(RunConfig.from_keys(backend="gloo-native"))
    assert not native_store.hosts_it(cfg(1, native_store="head:1"))
    assert not native_store.hosts_it(RunConfig.from_keys(backend="gloo"))


def test_another_groups_ftrun_only_records_the_address(tmp_path) -> None:
    store = native_store.open_native_store(tmp_path, cfg(1, native_store="head:29520"), free_port=1)
    assert (store.proc, store.address, store.log) == (None, "head:29520", None)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "group,value,network,needle",
    [
        (1, "127.0.0.1:29520", HOSTS, "loopback, but the lighthouse http://head:29510 is not"),
        (0, "localhost:29520", HOSTS, "loopback, but the lighthouse"),
        (1, "nowhere:29520", HOSTS, "nowhere does not resolve on this host"),
        # this host's own name resolves to loopback here: another host's store is not there
        (1, "selfname:29520", HOSTS, "selfname resolves to loopback (127.0.1.1) on this host, but replica group 0"),
    ],
)
def test_what_cannot_reach_the_store_is_refused_in_one_line(host, group, value, network, needle) -> None:  # noqa: F811
    with pytest.raises(BadInput) as e:
        native_store.check(cfg(group, native_store=value), network)
    assert str(e.value).startswith(f"--native-store {value}: ") and needle in str(e.value) and "\n" not in str(e.value)


def test_the_hosting_group_under_its_own_name_and_a_free_port(host) -> None:  # noqa: F811
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        taken = s.getsockname()[1]
        # group 0's host: its own name resolves to loopback here, and the store listens on every interface
        with pytest.raises(BadInput, match=rf"^--native-store selfname:{taken}: port {taken} cannot be listened on"):
            native_store.check(cfg(0, native_store=f"selfname:{taken}"), HOSTS)
    native_store.check(cfg(0, native_store=f"selfname:{taken}"), HOSTS)
    native_store.check(cfg(1, native_store=f"head:{taken}"), HOSTS)  # another host's: nothing to bind here
    native_store.check(build(backend="gloo-native", native_store=f"127.0.0.1:{taken}"), LOOPBACK)
