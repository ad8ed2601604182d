"""Where this host's replica group is reached from the other hosts of a job. Torch-free.

A group talks to other hosts three ways: the lighthouse hands every group the quorum's store
address (the group's torchrun store: ``--master-addr``), torchft's manager and checkpoint
server advertise a host name (``--advertise-host``), and the process groups (Gloo, NCCL)
connect to the address of the interface they bind (``GLOO_SOCKET_IFNAME``,
``NCCL_SOCKET_IFNAME``; without them Gloo binds whatever this host's name resolves to, which is
loopback on a stock Debian/Ubuntu ``/etc/hosts``). ``resolve`` chooses all three from one
found address, so a group is reachable from every other host by default:

* scope ``loopback``: no ``--lighthouse``, or one on a loopback address (only this host can
  reach it, so every group is here): torchrun ``--standalone``, nothing set.
* scope ``hosts``: the address this host uses to reach the lighthouse (a UDP ``connect()`` asks
  the routing table; nothing is sent). When that is loopback (the lighthouse runs here, under a
  name that resolves to loopback here), the default route's interface, else the only interface
  with an address. ``--master-addr``, ``--interface`` or a ``GLOO_SOCKET_IFNAME`` the user set
  choose instead; ``--advertise-host`` names what torchft advertises (default: the address).

``BadInput`` (one line) for what cannot work across hosts: a loopback store or advertised
address, an advertised name that does not resolve here or resolves to loopback, an interface
that does not exist, or no way to tell which interface other hosts reach.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from ftrun.config import RunConfig
from ftrun.errors import BadInput
from ftrun.layout import Network

IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
_SIOCGIFFLAGS, _SIOCGIFADDR, _IFF_UP, _IFF_LOOPBACK = 0x8913, 0x8915, 0x1, 0x8


def is_loopback(host: str) -> bool:
    """``localhost`` or an address in 127.0.0.0/8 or ::1 (a name is not resolved here)."""
    h = host.strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _ifreq(sock: socket.socket, request: int, name: str) -> bytes:
    return fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name.encode()[:15]))


def interfaces() -> dict[str, list[str]]:
    """Interface name -> its addresses (IPv4 first, then IPv6 global ones), every interface that
    exists (an interface without an address maps to ``[]``)."""
    out: dict[str, list[str]] = {name: [] for _, name in socket.if_nameindex()}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in out:
            try:
                out[name].append(socket.inet_ntoa(_ifreq(s, _SIOCGIFADDR, name)[20:24]))
            except OSError:
                pass  # no IPv4 address
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()[:4096]
    except OSError:
        lines = []
    for ln in lines:
        parts = ln.split()
        if len(parts) == 6 and parts[5] in out:
            addr = ipaddress.IPv6Address(int(parts[0], 16))
            if not (addr.is_link_local or addr.is_loopback):
                out[parts[5]].append(str(addr))
    return out


def is_up(name: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            flags = struct.unpack("H", _ifreq(s, _SIOCGIFFLAGS, name)[16:18])[0]
    except OSError:
        return False
    return bool(flags & _IFF_UP) and not flags & _IFF_LOOPBACK


def default_route_interface() -> str | None:
    """The interface of the IPv4 default route with the lowest metric (``/proc/net/route``)."""
    try:
        rows = [ln.split() for ln in Path("/proc/net/route").read_text().splitlines()[1:4096]]
    except OSError:
        return None
    best = [(int(r[6]), r[0]) for r in rows if len(r) >= 8 and r[1] == "00000000" and int(r[3], 16) & 0x1]
    return min(best)[1] if best else None


def route_source(host: str, port: int) -> str:
    """The local address this host sends from to reach ``host:port`` (a UDP connect: the kernel
    picks the route; no packet is sent). ``BadInput`` when ``host`` does not resolve."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    except socket.gaierror as e:
        raise BadInput(f"--lighthouse: host {host!r} does not resolve on this host ({e.strerror})") from None
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect(addr)
        except OSError as e:
            raise BadInput(f"--lighthouse: no route from this host to {host} ({e.strerror})") from None
        return s.getsockname()[0]


def interface_of(address: str, ifaces: Mapping[str, list[str]]) -> str | None:
    for name, addrs in ifaces.items():
        if address in addrs:
            return name
    return None


def _resolve_here(flag: str, host: str) -> str:
    """``host`` resolved on this host (an address stays as it is); ``BadInput`` if it does not resolve."""
    try:
        return str(socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)[0][4][0])  # the address
    except socket.gaierror as e:
        raise BadInput(
            f"{flag} {host}: does not resolve on this host ({e.strerror}); "
            "the other hosts must reach this group under it"
        ) from None


def _check_ifname_vars(environ: Mapping[str, str], ifaces: Mapping[str, list[str]]) -> None:
    """A ``GLOO_SOCKET_IFNAME`` (comma list of names) or ``NCCL_SOCKET_IFNAME`` (names or
    prefixes, ``=`` exact, ``^`` excludes) the user set must name an interface that exists."""
    for var in IFNAME_VARS:
        value = environ.get(var, "").strip()
        if not value or value.startswith("^"):
            continue
        for item in (x.strip() for x in value.split(",")):
            exact = var == "GLOO_SOCKET_IFNAME" or item.startswith("=")
            name = item.lstrip("=")
            if name and not any(i == name if exact else i.startswith(name) for i in ifaces):
                raise BadInput(f"{var}={value}: no interface {name!r} on this host (interfaces: {', '.join(ifaces)})")


def _pick_when_lighthouse_is_here(lh_host: str, ifaces: Mapping[str, list[str]]) -> tuple[str, str, str]:
    """The lighthouse's name resolves to loopback here (it runs on this host): the interface other
    hosts reach this host through is not in the route to it. The default route's, else the only one."""
    default = default_route_interface()
    if default and ifaces.get(default):
        return ifaces[default][0], default, "the default route's interface (the lighthouse resolves to loopback here)"
    usable = {n: a for n, a in ifaces.items() if a and is_up(n)}
    if len(usable) == 1:
        ((name, addrs),) = usable.items()
        return addrs[0], name, "the only interface with an address (the lighthouse resolves to loopback here)"
    listed = ", ".join(f"{n} ({a[0]})" for n, a in usable.items()) or "none with an address"
    raise BadInput(
        f"--lighthouse: {lh_host} resolves to loopback on this host and there is no default route to tell "
        f"which interface the other hosts reach it through (interfaces: {listed}); give --interface NAME"
    )


def resolve(cfg: RunConfig, environ: Mapping[str, str]) -> Network:
    """This host's groups' network identity (module rules); ``BadInput`` for what cannot work."""
    lh = urlparse(cfg.hosts.lighthouse).hostname if cfg.hosts.lighthouse else None
    if lh is None or is_loopback(lh):
        for flag, value in (("--master-addr", cfg.hosts.master_addr), ("--advertise-host", cfg.hosts.advertise_host)):
            if value and not is_loopback(value):
                _resolve_here(flag, value)
        return Network(
            scope="loopback",
            address=cfg.hosts.master_addr or "localhost",
            interface=None,
            advertise_host=cfg.hosts.advertise_host or "localhost",
            found="loopback lighthouse: every group on this host",
            env={},
            env_from_user=[],
        )
    ifaces = interfaces()
    _check_ifname_vars(environ, ifaces)
    if cfg.hosts.interface and cfg.hosts.interface not in ifaces:
        raise BadInput(
            f"--interface {cfg.hosts.interface}: no such interface on this host (interfaces: {', '.join(ifaces)})"
        )
    user_if = cfg.hosts.interface or environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0].strip()
    if cfg.hosts.master_addr:
        if is_loopback(cfg.hosts.master_addr):
            raise BadInput(
                f"--master-addr {cfg.hosts.master_addr}: loopback, but the lighthouse {cfg.hosts.lighthouse} is not; "
                "the other hosts could not reach this group's store"
            )
        address = _resolve_here("--master-addr", cfg.hosts.master_addr)
        interface = interface_of(address, ifaces)
        if interface is None:
            raise BadInput(
                f"--master-addr {cfg.hosts.master_addr}: {address} is no address of this host "
                f"(interfaces: {', '.join(f'{n} {a}' for n, a in ifaces.items() if a)})"
            )
        address, found = cfg.hosts.master_addr, "--master-addr"
    elif user_if:
        src = "--interface" if cfg.hosts.interface else "GLOO_SOCKET_IFNAME"
        if not ifaces.get(user_if):
            raise BadInput(f"{src} {user_if}: the interface has no address")
        address, interface, found = ifaces[user_if][0], user_if, src
    else:
        address = route_source(lh, urlparse(cfg.hosts.lighthouse).port or 80)
        interface = interface_of(address, ifaces)
        found = "the route to the lighthouse"
        if is_loopback(address) or interface is None:
            address, interface, found = _pick_when_lighthouse_is_here(lh, ifaces)
    advertise = cfg.hosts.advertise_host or address
    if cfg.hosts.advertise_host:
        if is_loopback(cfg.hosts.advertise_host) or is_loopback(
            _resolve_here("--advertise-host", cfg.hosts.advertise_host)
        ):
            raise BadInput(
                f"--advertise-host {cfg.hosts.advertise_host}: loopback on this host, but the lighthouse "
                f"{cfg.hosts.lighthouse} is not; torchft hands this name to the other groups"
            )
    env = {var: environ[var] for var in IFNAME_VARS if environ.get(var)}
    from_user = sorted(env)
    for var in IFNAME_VARS:
        env.setdefault(var, interface)
    return Network(
        scope="hosts",
        address=address,
        interface=interface,
        advertise_host=advertise,
        found=found,
        env=env,
        env_from_user=from_user,
    )
