"""``ftrun.worker.native_pg.NativeGroup``: the native group's handle travels inside torchft's JSON
handle (what ftrun's wrappers read), and ``reconfigure`` hands the native group the native handles
in the quorum's order, then names it as torchft names its groups. A stand-in for the native group:
no process, no store. Needs torchft-nightly (its ReconfigureOptions); skipped on 0.2.x."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

if not hasattr(pytest.importorskip("torchft.process_group"), "ReconfigureOptions"):
    pytest.skip("needs torchft-nightly (torchft.process_group.ReconfigureOptions)", allow_module_level=True)

from torchft.process_group import ReconfigureOptions  # noqa: E402

from ftrun.worker.native_pg import NativeGroup  # noqa: E402


class _Work:
    def __init__(self) -> None:
        self.waited = 0

    def wait(self) -> bool:
        self.waited += 1
        return True


class _Native:
    """What NativeGroup calls on torch's native ProcessGroup."""

    def __init__(self, handle: str) -> None:
        self.handle, self.calls, self.name = handle, [], None

    def get_reconfigure_handle(self) -> str:
        return self.handle

    def reconfigure(self, opts) -> _Work:
        self.calls.append((opts.uuid, list(opts.handles), opts.timeout))
        return _Work()

    def _set_group_name(self, name: str) -> None:
        self.name = name


def test_handle_and_reconfigure() -> None:
    native = _Native("gloo:1:-1:1:127.0.0.1:5000")
    pg = NativeGroup(native, "127.0.0.1:5000", timedelta(seconds=7))
    pg.set_rank_info("job_replica1", 0, 1, 1)
    mine = json.loads(pg.get_reconfigure_handle())
    assert mine["native"] == "gloo:1:-1:1:127.0.0.1:5000" and mine["store"] == "127.0.0.1:5000"
    assert mine["global_rank"] == 1 and mine["id"] == pg._handle_id()
    peer = json.dumps({"id": "peer", "store": "127.0.0.1:5000", "global_rank": 0, "native": "gloo:0:-1:0:x:1"})
    opts = ReconfigureOptions()
    opts.uuid, opts.handles, opts.timeout = 5, [peer, json.dumps(mine)], None
    work = pg.reconfigure(opts)
    assert native.calls == [(5, ["gloo:0:-1:0:x:1", "gloo:1:-1:1:127.0.0.1:5000"], timedelta(seconds=7))]
    assert work.waited == 1 and pg._rank == 1 and native.name == "torchft_5_rank_0"


class _C10d:
    """A stand-in for ``torch.distributed`` recording what ``native_group`` builds: a real
    ProcessGroupNCCL2 cannot be destroyed on a host without an NVIDIA driver (torch aborts)."""

    class ProcessGroup:
        class BackendType:
            GLOO, CUSTOM = "GLOO", "CUSTOM"

        def __init__(self, store, rank, size) -> None:
            self.args, self.registered, self.default = (store, rank, size), None, None

        def _set_default_backend(self, kind) -> None:
            self.default = kind

        def _register_backend(self, device, kind, impl) -> None:
            self.registered = (str(device), kind, impl)

    class ProcessGroupNCCL:
        class Options:
            _timeout = None
            enable_reconfigure = False

    def __init__(self) -> None:
        self.made: list = []

    def TCPStore(self, host, port, **kw):  # noqa: N802 (torch's names)
        self.made.append(("store", host, port, kw["is_master"]))
        return "store"

    def PrefixStore(self, prefix, store):  # noqa: N802
        return f"{prefix}@{store}"

    def ProcessGroupNCCL2(self, store, rank, size, opts):  # noqa: N802
        self.made.append(("nccl2", store, rank, size, opts.enable_reconfigure, opts._timeout))
        return "nccl2-backend"

    def ProcessGroupGloo(self, store, rank, size, timeout, enable_reconfigure):  # noqa: N802
        self.made.append(("gloo", store, rank, size, enable_reconfigure, timeout))
        return "gloo-backend"


@pytest.mark.parametrize(
    "backend,made,registered",
    [
        ("nccl2", "nccl2", ("cuda", "CUSTOM", "nccl2-backend")),  # as init_process_group("nccl2") registers it
        ("gloo-native", "gloo", ("cpu", "GLOO", "gloo-backend")),
    ],
)
def test_native_group_is_built_unconnected_on_the_bootstrap_store(monkeypatch, backend, made, registered) -> None:
    from ftrun.worker import native_pg

    fake = _C10d()
    monkeypatch.setattr(native_pg, "c10d", fake)
    t = timedelta(seconds=5)
    pg = native_pg.native_group(native_pg.NativeSite("host0:29520", 1, 3, 0), t, backend)
    # a client of the store ftrun hosts; initial rank = the replica group; one prefix per rank position
    assert fake.made == [("store", "host0", 29520, False), (made, "native/0@store", 1, 3, True, t)]
    assert pg._native.args == ("native/0@store", 1, 3) and pg._native.registered == registered
    assert pg._native.default == registered[1] and pg.getBackendName() == ("nccl2" if made == "nccl2" else "gloo")
