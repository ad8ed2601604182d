"""``ftrun.worker.native_pg.NativeGloo``: the native group's handle travels inside torchft's JSON
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

from ftrun.worker.native_pg import NativeGloo  # noqa: E402


class _Work:
    def __init__(self) -> None:
        self.waited = 0

    def wait(self) -> bool:
        self.waited += 1
        return True


class _Native:
    """What NativeGloo calls on torch's native ProcessGroup."""

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
    pg = NativeGloo(native, "127.0.0.1:5000", timedelta(seconds=7))
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
