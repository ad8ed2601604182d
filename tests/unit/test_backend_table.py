"""The process-group availability table (``ftrun.torchft_compat.backends.availability``): every
combination of torchft release x torch version x torchcomms package x CUDA GPUs x process group,
on hand-made facts (pure: nothing is imported or started)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from ftrun.torchft_compat.backends import (
    TABLE_BACKENDS,
    TORCHCOMMS_STATES,
    BackendFacts,
    availability,
    torchcomms_state_of_source,
)
from ftrun.torchft_compat.release import Release

RELEASES = {
    "0.2": Release("torchft", "0.2.0", "configure", None),
    "nightly": Release("torchft-nightly", "2026.10.26", "reconfigure", None),
}
TORCHES = ("2.13.0", "2.14.1")  # 2.14: enable_reconfigure and ProcessGroupNCCL2 in torch.distributed


CUDA = (False, True)  # CUDA GPUs visible


def _facts(release: str, torch: str, torchcomms: str, cuda: bool = False) -> BackendFacts:
    rel = dataclasses.replace(RELEASES[release], torch=torch)
    new_torch = torch == "2.14.1"
    return BackendFacts(rel, new_torch, new_torch, torchcomms, None if torchcomms == "missing" else "0.0.1", cuda)


def _expected(backend: str, release: str, torch: str, torchcomms: str, cuda: bool) -> str | None:
    """What the table must say: None (available) or a phrase its one line holds."""
    if backend in ("gloo", "baby-gloo", "nccl", "baby-nccl"):
        return None  # torchft's own groups, on every release (GPUs are placement's)
    if release == "0.2":
        return "torchft 0.2.0 has no reconfigure API"
    if backend == "gloo-native":
        return None if torch == "2.14.1" else f"torch {torch} cannot reconfigure a native group"
    if backend == "nccl2":
        if torch != "2.14.1":
            return f"torch {torch} has no ProcessGroupNCCL2"
        return None if cuda else "no CUDA GPU visible on this host"
    return {
        "missing": "torchcomms is not installed",
        "placeholder": "the installed torchcomms 0.0.1 is the registry's placeholder",
        "installed": "but ftrun does not build it yet",
    }[torchcomms]


COMBOS = list(itertools.product(TABLE_BACKENDS, RELEASES, TORCHES, TORCHCOMMS_STATES, CUDA))


@pytest.mark.parametrize("backend,release,torch,torchcomms,cuda", COMBOS)
def test_every_combination(backend, release, torch, torchcomms, cuda) -> None:
    got = availability(backend, _facts(release, torch, torchcomms, cuda))
    want = _expected(backend, release, torch, torchcomms, cuda)
    if want is None:
        assert got is None
        return
    assert got is not None and want in got, got
    assert "\n" not in got and got.startswith(f"--backend {backend}: "), got


def test_the_table_covers_every_group_and_all_combinations() -> None:
    assert set(TABLE_BACKENDS) == {"gloo", "baby-gloo", "nccl", "baby-nccl", "gloo-native", "torchcomms", "nccl2"}
    assert len(COMBOS) == 7 * 2 * 2 * 3 * 2


def test_nccl2_names_each_missing_piece_in_one_line() -> None:
    assert availability("nccl2", _facts("0.2", "2.14.1", "missing", True)) == (
        "--backend nccl2: torchft 0.2.0 has no reconfigure API "
        "(its Manager takes torchft's own process groups only; torchft-nightly has it)"
    )
    assert availability("nccl2", _facts("nightly", "2.13.0", "missing", True)) == (
        "--backend nccl2: torch 2.13.0 has no ProcessGroupNCCL2 (torch >= 2.14 built with NCCL)"
    )
    assert availability("nccl2", _facts("nightly", "2.14.1", "missing", False)) == (
        "--backend nccl2: no CUDA GPU visible on this host (torch's native NCCL group runs on GPUs)"
    )
    assert availability("nccl2", _facts("nightly", "2.14.1", "missing", True)) is None


def test_the_refusals_on_torchft_0_2_and_torch_2_13_are_unchanged() -> None:
    old = _facts("0.2", "2.13.0", "missing")
    assert availability("gloo-native", old) == (
        "--backend gloo-native: torchft 0.2.0 has no reconfigure API "
        "(its Manager takes torchft's own process groups only; torchft-nightly has it)"
    )
    assert availability("gloo-native", _facts("nightly", "2.13.0", "missing")) == (
        "--backend gloo-native: torch 2.13.0 cannot reconfigure a native group "
        "(no enable_reconfigure in torch.distributed; torchft's shim says torch >= 2.14)"
    )


def test_torchcomms_package_states() -> None:
    # the registry's torchcomms 0.0.1: its whole __init__.py
    placeholder = 'raise ImportError("torchcomms can\'t be installed via PyPi -- see README for more details")\n'
    assert torchcomms_state_of_source(None) == "missing"
    assert torchcomms_state_of_source("# header\n\n" + placeholder) == "placeholder"
    assert torchcomms_state_of_source("from torchcomms._comms import *\n") == "installed"
