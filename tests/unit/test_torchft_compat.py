"""``ftrun.torchft_compat``: which torchft is installed, the supported-range check, the recorded
versions, and the process-group API of both releases (torchft 0.2.x: ``configure``;
torchft-nightly: ``reconfigure``). Runs on either release (CI runs it on both); the tests that
expect one release's behaviour say which. Unit tests: no process."""

from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path

import pytest

from ftrun import torchft_compat as compat
from ftrun.errors import BadInput
from train_fixtures import cli, one_line

CPU_RUN = Path(__file__).parent.parent / "data" / "cpu_run"


def _dist() -> str:
    """The distribution this venv has (CI: torchft in .venv, torchft-nightly in .venv-nightly)."""
    have = [d for d in compat.DISTRIBUTIONS if _has(d)]
    assert len(have) == 1, have
    return have[0]


def _has(dist: str) -> bool:
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


def test_installed_release_matches_metadata_and_the_live_api() -> None:
    rel = compat.installed()
    dist = _dist()
    assert rel.distribution == dist and rel.version == metadata.version(dist)
    assert rel.torch == metadata.version("torch")
    from torchft.process_group import ProcessGroupGloo

    # what the source says (torch-free, for the parent) is what a live group offers (the worker)
    assert rel.pg_api == compat.pg_api(ProcessGroupGloo())
    # each release's API, by name: 0.2.x configure, the nightly reconfigure
    assert rel.pg_api == {"torchft": "configure", "torchft-nightly": "reconfigure"}[dist]
    assert compat.unsupported(rel) is None and compat.require_supported() == rel


@pytest.mark.parametrize(
    "dist, version, supported",
    [
        ("torchft", "0.2.0", True),
        ("torchft", "0.2.1.dev3", True),  # compared by its numbers up to the first non-number part: 0.2.1
        ("torchft", "0.3rc1", False),  # 0.3: the first unsupported release
        ("torchft", "garbage", False),  # no number at all
        ("torchft-nightly", "2026.10.26", True),
        ("torchft-nightly", "2026.10.25", False),  # each number counts, not only the first
    ],
)
def test_versions_compare_by_their_numeric_parts(dist, version, supported) -> None:
    assert (compat.unsupported(compat.Release(dist, version, "configure", "2.13.0")) is None) == supported


def test_pg_api_of_source() -> None:
    old = "class ProcessGroup:\n    def configure(\n        self, store_addr: str, ...\n"
    new = "class ProcessGroup:\n    def supports_reconfigure(self) -> bool:\n    def reconfigure(self, opts):\n"
    assert compat.pg_api_of_source(old) == "configure"
    assert compat.pg_api_of_source(new) == "reconfigure"
    assert compat.pg_api_of_source(old + new) == "reconfigure"
    assert compat.pg_api_of_source("def allreduce(") is None


@pytest.mark.parametrize(
    "rel, needle",
    [
        (compat.Release(None, None, None, "2.13.0"), "torchft is not installed"),
        (
            compat.Release("torchft", "0.1.9", "configure", "2.13.0"),
            "torchft 0.1.9 is not supported (ftrun supports torchft 0.2.x)",
        ),
        (compat.Release("torchft", "0.3.0", "configure", "2.13.0"), "torchft 0.3.0 is not supported"),
        (
            compat.Release("torchft-nightly", "2026.9.1", "configure", "2.13.0"),
            "torchft-nightly 2026.9.1 is not supported (ftrun supports torchft-nightly >= 2026.10.26)",
        ),
        (
            compat.Release("torchft torchft-nightly", "0.2.0 2026.10.26", "configure", "2.13.0"),
            "both torchft and torchft-nightly are installed",
        ),
    ],
)
def test_unsupported_is_one_line_naming_the_release(rel, needle) -> None:
    why = compat.unsupported(rel)
    assert why and needle in why and "\n" not in why


@pytest.mark.parametrize(
    "rel",
    [
        compat.Release("torchft", "0.2.0", "configure", "2.13.0"),
        compat.Release("torchft", "0.2.7", "configure", "2.13.0"),
        compat.Release("torchft-nightly", "2026.10.26", "reconfigure", "2.13.0"),
        compat.Release("torchft-nightly", "2027.1.5", "reconfigure", "2.14.0"),
    ],
)
def test_supported_releases(rel) -> None:
    assert compat.unsupported(rel) is None


def _fake(monkeypatch, rel: compat.Release) -> None:
    # where it is called: ``require_supported`` (in the release module) and the callers that
    # import it from the package when they run (preflight, sweep)
    monkeypatch.setattr(compat.release, "installed", lambda: rel)
    monkeypatch.setattr(compat, "installed", lambda: rel)


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--steps", "4", "--profile", "none"],
        ["sweep", "--preset", "pgs", "--steps", "4"],
        ["launch", "--no-inspect", "tests/torchft_example.py"],
    ],
)
def test_commands_that_train_refuse_an_unsupported_torchft(monkeypatch, tmp_path, argv) -> None:
    _fake(monkeypatch, compat.Release("torchft", "0.1.0", "configure", "2.13.0"))
    one_line(cli(*argv, "--out", str(tmp_path)), "torchft 0.1.0 is not supported")
    assert not any(tmp_path.iterdir()), "nothing was started or written"


def test_require_supported_raises_bad_input(monkeypatch) -> None:
    _fake(monkeypatch, compat.Release(None, None, None, None))
    with pytest.raises(BadInput, match="torchft is not installed"):
        compat.require_supported()


def test_versions_record_and_describe() -> None:
    v = compat.versions("9.9.9")
    assert v["torch"] == "9.9.9" and v["torchft_distribution"] == _dist() and v["torchft"] and v["torchft_pg_api"]
    assert v["ftrun"] and v["python"]
    assert (
        compat.describe_versions(v) == f"{_dist()} {v['torchft']} (process groups: {v['torchft_pg_api']}), torch 9.9.9"
    )
    # a run dir of an earlier ftrun: only "torchft"; its distribution and API are unknown
    assert compat.describe_versions({"torch": "2.13.0+cpu", "torchft": "0.2.0"}) == "torchft 0.2.0, torch 2.13.0+cpu"
    assert compat.describe_versions({"torch": "2.13.0"}) is None and compat.describe_versions(None) is None


def test_inspect_header_names_what_ran(tmp_path) -> None:
    run = tmp_path / "run"
    shutil.copytree(CPU_RUN, run)
    m = json.loads((run / "manifest.json").read_text())
    m["versions"].update(torchft="2026.10.26", torchft_distribution="torchft-nightly", torchft_pg_api="reconfigure")
    (run / "manifest.json").write_text(json.dumps(m))
    res = cli("inspect-trace", str(run))
    assert res.exit_code == 0, res.output
    head = " ".join(res.output.split("schedule")[0].split())  # the lines before the schedule, unwrapped
    assert head == "ran on torchft-nightly 2026.10.26 (process groups: reconfigure), torch 2.13.0+cpu"
    res = cli("inspect-trace", str(run), "--json")
    assert json.loads(res.output)["versions"]["torchft_distribution"] == "torchft-nightly"
    old = cli("inspect-trace", str(CPU_RUN))  # an earlier ftrun's manifest: what it has
    assert " ".join(old.output.split("schedule")[0].split()) == "ran on torchft 0.2.0, torch 2.13.0+cpu"


def test_quorum_proxy_passes_the_nightly_reconfigure_handle_through() -> None:
    seen = []

    class Client:
        def _quorum(self, **kwargs):
            return {"quorum_id": 1, **kwargs}

    class Manager:
        _client = Client()

    m = Manager()
    compat.after_each_quorum(m, seen.append)
    got = m._client._quorum(step=2, reconfigure_handle='{"id": "x"}')
    assert got == {"quorum_id": 1, "step": 2, "reconfigure_handle": '{"id": "x"}'} and seen == [got]


def test_process_groups_each_release_offers(monkeypatch) -> None:
    old = compat.Release("torchft", "0.2.0", "configure", "2.13.0")
    new = compat.Release("torchft-nightly", "2026.10.26", "reconfigure", "2.13.0")
    assert compat.process_group_backends(old) == ("gloo", "baby-gloo", "nccl", "baby-nccl")
    assert compat.process_group_backends(new) == (
        *("gloo", "baby-gloo", "nccl", "baby-nccl"),
        *("gloo-native", "nccl2", "torchcomms"),
    )
    assert "has no reconfigure API" in compat.backend_unavailable("gloo-native", old)
    assert compat.backend_unavailable("gloo", new) is None  # the rest is placement's
    monkeypatch.setattr(compat.backends, "_torch_native_reconfigure", lambda: False)
    assert "torch 2.13.0 cannot reconfigure a native group" in compat.backend_unavailable("gloo-native", new)
    monkeypatch.setattr(compat.backends, "_torch_native_reconfigure", lambda: True)
    assert compat.backend_unavailable("gloo-native", new) is None  # ftrun builds it (ftrun.worker.native_pg)
    monkeypatch.setattr(compat.backends, "_torch_nccl2", lambda: True)
    assert "no CUDA GPU visible" in compat.backend_unavailable("nccl2", new)  # the caller sees no GPU
    assert compat.backend_unavailable("nccl2", new, cuda=True) is None  # built too, on GPUs
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchcomms" else real(name, *a))
    assert (
        compat.backend_unavailable("torchcomms", new)
        == "--backend torchcomms: torchcomms is not installed (the registry's torchcomms 0.0.1 is a placeholder "
        "whose import raises ImportError; torchcomms comes from its own builds)"
    )


def test_pgs_preset_lists_what_the_installed_release_offers(tmp_path) -> None:
    from ftrun.sweep.cells import plan

    axes, _, cells, _ = plan("pgs", [], {"steps": 20}, None, tmp_path / "s")
    rel = compat.installed()
    assert axes[0].key == "backend" and axes[0].values == compat.process_group_backends(rel)
    for c in cells:
        if c.params["backend"] in compat.RECONFIGURE_BACKENDS:  # only on the nightly (gloo-native: torch >= 2.14)
            why = compat.backend_unavailable(c.params["backend"], rel)
            if why:
                assert (c.status, c.reason) == ("unavailable", why)
            else:  # built here: unavailable only for another reason (--quantize needs CUDA)
                assert c.status == "run" or not (c.reason or "").startswith("--backend"), c
    if rel.pg_api == "configure":  # torchft 0.2.x
        assert not any(c.params["backend"] in compat.RECONFIGURE_BACKENDS for c in cells)
    else:  # torchft-nightly
        assert {c.params["backend"] for c in cells} >= set(compat.RECONFIGURE_BACKENDS)


def test_train_refuses_a_backend_the_release_does_not_offer(monkeypatch, tmp_path) -> None:
    _fake(monkeypatch, compat.Release("torchft", "0.2.0", "configure", "2.13.0"))
    res = cli("train", "--backend", "gloo-native", "--steps", "4", "--profile", "none", "--out", str(tmp_path))
    assert res.exit_code == 2 and "--backend gloo-native: torchft 0.2.0 has no reconfigure API" in " ".join(
        res.output.split()
    )
    assert not any(tmp_path.iterdir())


def test_train_refuses_gloo_native_across_hosts_without_its_store(monkeypatch, tmp_path) -> None:
    # a release and torch that offer it: across hosts the groups must be told where the store is
    _fake(monkeypatch, compat.Release("torchft-nightly", "2026.10.26", "reconfigure", "2.14.1"))
    monkeypatch.setattr(compat.backends, "_torch_native_reconfigure", lambda: True)
    res = cli(
        "train",
        *("--backend", "gloo-native", "--replica-group-id", "1", "--num-replica-groups", "2"),
        *("--lighthouse", "http://127.0.0.1:9", "--steps", "4", "--profile", "none", "--out", str(tmp_path)),
    )
    assert res.exit_code == 2 and "--backend gloo-native: across hosts (--replica-group-id) needs --native-store" in (
        " ".join(res.output.split())
    )
    assert not any(tmp_path.iterdir())
