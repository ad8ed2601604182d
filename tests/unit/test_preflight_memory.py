"""The preflight refuses more replica groups than the host's available memory holds (issue 42 item 16)."""

from __future__ import annotations

import pytest

import ftrun.config as cfgmod
from ftrun.errors import BadInput
from ftrun.launch import preflight

GIB = 2**30


def _fake_memory(monkeypatch, available: int) -> None:
    monkeypatch.setattr(preflight, "host_memory_bytes", lambda: 64 * GIB)
    monkeypatch.setattr(preflight, "available_memory_bytes", lambda: available)


def _forks(monkeypatch, forks: bool) -> None:
    import ftrun.worker.agent as agent

    monkeypatch.setattr(agent, "fork_safe", lambda: forks)


def test_a_group_costs_at_least_its_processes_torch_import(tmp_path, monkeypatch):
    _forks(monkeypatch, False)  # a CUDA build: every worker a fresh interpreter
    one = cfgmod.build(out=str(tmp_path), replicas=1)
    two_ranks = cfgmod.build(out=str(tmp_path), replicas=1, nproc_per_replica=2)
    assert preflight.group_bytes(one) >= 2 * preflight.PROCESS_BYTES  # agent + worker
    assert preflight.group_bytes(two_ranks) - preflight.group_bytes(one) >= preflight.PROCESS_BYTES


def test_forked_groups_share_one_zygotes_runtime(tmp_path, monkeypatch):
    from ftrun.launch.zygote import ENV_ZYGOTE

    one = cfgmod.build(out=str(tmp_path), replicas=1)
    two_ranks = cfgmod.build(out=str(tmp_path), replicas=1, nproc_per_replica=2)
    _forks(monkeypatch, True)
    monkeypatch.delenv(ENV_ZYGOTE, raising=False)
    forked_one, forked_two = preflight.group_bytes(one), preflight.group_bytes(two_ranks)
    assert forked_one < preflight.PROCESS_BYTES  # only its model and batch: the runtime is the zygote's
    assert 0 < forked_two - forked_one < preflight.PROCESS_BYTES  # a second rank adds its model and batch
    assert preflight.zygote_bytes(one) == preflight.PROCESS_BYTES  # the training's own zygote, once
    monkeypatch.setenv(ENV_ZYGOTE, "123:/tmp/ftrun-zygote-x/sock")  # a sweep's trainings: the sweep's
    assert preflight.zygote_bytes(one) == 0 and preflight.group_bytes(one) == forked_one
    _forks(monkeypatch, False)  # no forking here: every process imports torch, no zygote
    assert preflight.zygote_bytes(one) == 0
    assert preflight.group_bytes(one) == 2 * preflight.PROCESS_BYTES + forked_one
    _forks(monkeypatch, True)
    fresh = one.replaced(fork_agents=False)  # --no-fork-agents: each agent a fresh interpreter, ranks forked from it
    monkeypatch.delenv(ENV_ZYGOTE)
    assert preflight.zygote_bytes(fresh) == 0 and preflight.group_bytes(fresh) == preflight.PROCESS_BYTES + forked_one
    _fake_memory(monkeypatch, available=preflight.group_bytes(fresh))
    with pytest.raises(BadInput) as e:
        preflight.check_memory(fresh.replaced(replicas=16))
    assert "a torchrun agent and 1 worker(s) forked from it" in str(e.value), str(e.value)


@pytest.mark.parametrize("forks", [False, True])
def test_the_refusal_says_how_the_workers_start(tmp_path, monkeypatch, forks):
    from ftrun.launch.zygote import ENV_ZYGOTE

    _forks(monkeypatch, forks)
    monkeypatch.delenv(ENV_ZYGOTE, raising=False)
    cfg = cfgmod.build(out=str(tmp_path), replicas=16)
    _fake_memory(monkeypatch, available=preflight.group_bytes(cfg))
    with pytest.raises(BadInput) as e:
        preflight.check_memory(cfg)
    msg = str(e.value)
    assert ("forked from a zygote" in msg) is forks and ("a torchrun agent and 1 worker(s)" in msg) is not forks, msg
    assert ("once for the zygote" in msg) is forks, msg
    assert preflight.MEASURED_WITH in msg, msg


def test_replicas_that_cannot_fit_are_refused_naming_the_numbers(tmp_path, monkeypatch):
    cfg = cfgmod.build(out=str(tmp_path), replicas=16)
    each, once = preflight.group_bytes(cfg), preflight.zygote_bytes(cfg)
    _fake_memory(monkeypatch, available=once + 4 * each + each // 2)
    with pytest.raises(BadInput) as e:
        preflight.check_memory(cfg)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--replicas 16: 16 replica group(s)"), msg
    assert f"{(16 * each + once) / GIB:.1f} GiB" in msg and "at most 4 group(s) fit" in msg, msg
    assert "available" in msg and preflight.MEASURED_WITH in msg, msg
    preflight.check_memory(cfgmod.build(out=str(tmp_path), replicas=4))  # exactly what fits passes


def test_only_this_hosts_groups_count_and_unknown_memory_is_left_to_the_run(tmp_path, monkeypatch):
    cfg = cfgmod.build(out=str(tmp_path), replicas=16)
    _fake_memory(monkeypatch, available=preflight.group_bytes(cfg) + preflight.zygote_bytes(cfg))
    cfg = cfg.replaced(replica_group_id=3)  # one group of the sixteen runs here
    preflight.check_memory(cfg)
    monkeypatch.setattr(preflight, "available_memory_bytes", lambda: None)
    preflight.check_memory(cfgmod.build(out=str(tmp_path), replicas=16))
    assert preflight.why_unavailable(cfgmod.build(out=str(tmp_path), replicas=16)) is None
