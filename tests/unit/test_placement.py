"""Placement of ranks on GPUs: a pure function of (device ids, groups, ranks per group)."""

from __future__ import annotations

import pytest

from ftrun.errors import BadInput
from ftrun.launch.placement import host_devices, place, plan


def test_no_devices_is_cpu():
    p = place([], [0, 1], 1)
    assert p.mode == "cpu" and not p.env and not p.devices


def test_one_gpu_per_group_when_enough():
    p = place(["0", "1", "2", "3"], [0, 1], 2)
    assert p.mode == "own"
    assert p.env == {0: {"CUDA_VISIBLE_DEVICES": "0,1"}, 1: {"CUDA_VISIBLE_DEVICES": "2,3"}}
    assert p.devices == {(0, 0): "0", (0, 1): "1", (1, 0): "2", (1, 1): "3"}


def test_visible_ids_are_kept_as_given():
    p = place(["5", "7"], [0, 1], 1)
    assert p.env[0]["CUDA_VISIBLE_DEVICES"] == "5" and p.env[1]["CUDA_VISIBLE_DEVICES"] == "7"


def test_groups_share_with_their_own_hostid():
    p = place(["0"], [0, 1, 2], 1)
    assert p.mode == "shared"
    assert {g: e["NCCL_HOSTID"] for g, e in p.env.items()} == {
        0: "ftrun_replica0",
        1: "ftrun_replica1",
        2: "ftrun_replica2",
    }
    assert set(p.devices.values()) == {"0"}


def test_shared_groups_spread_and_never_repeat_a_device_inside_a_group():
    p = place(["0", "1", "2"], [0, 1], 2)
    assert p.mode == "shared"
    for g in (0, 1):
        devs = p.env[g]["CUDA_VISIBLE_DEVICES"].split(",")
        assert len(set(devs)) == 2
    used = {d for d in p.devices.values()}
    assert used == {"0", "1", "2"}  # all three GPUs carry work


def test_two_ranks_of_one_group_on_one_device_refused():
    with pytest.raises(BadInput) as e:
        place(["0"], [0, 1], 2)
    assert "--nproc-per-replica 2" in str(e.value) and "has 1 visible" in str(e.value)
    assert "\n" not in str(e.value)


def test_one_group_per_host_uses_its_own_index():
    p = place(["0", "1"], [3], 2)
    assert p.mode == "own" and p.env == {3: {"CUDA_VISIBLE_DEVICES": "0,1"}}


def test_host_devices_from_env():
    assert host_devices({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert host_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert host_devices({"CUDA_VISIBLE_DEVICES": "-1"}) == []


def test_plan_gloo_never_places_and_nccl_without_gpu_refused():
    assert plan("gloo", [0, 1], 1, {"CUDA_VISIBLE_DEVICES": "0,1"}).mode == "cpu"
    assert plan("nccl", [0, 1], 1, {"CUDA_VISIBLE_DEVICES": "0,1"}).mode == "own"
    with pytest.raises(BadInput, match="no GPU visible"):
        plan("nccl", [0, 1], 1, {"CUDA_VISIBLE_DEVICES": ""})
    assert plan("auto", [0, 1], 1, {"CUDA_VISIBLE_DEVICES": ""}).mode == "cpu"


def test_quantize_refused_without_cuda_or_triton():
    from ftrun.launch.placement import check_quantize

    gpu = place(["0", "1"], [0, 1], 1)
    check_quantize(False, "gloo", place([], [0], 1))  # not asked: nothing to refuse
    check_quantize(True, "nccl", gpu, has_triton=True)
    with pytest.raises(BadInput, match="needs CUDA"):
        check_quantize(True, "gloo", place([], [0], 1), has_triton=True)
    with pytest.raises(BadInput, match="needs triton"):
        check_quantize(True, "nccl", gpu, has_triton=False)
