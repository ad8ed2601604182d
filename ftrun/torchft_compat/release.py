"""Which torchft is installed and whether ftrun supports it (torch-free: package metadata and
source text), what run dirs record of it, and what each release does after a failed commit.

Two distributions install the same import name ``torchft`` — ``torchft`` 0.2.x (PyPI) and
``torchft-nightly`` (checked: 2026.10.26). ftrun requires neither by name (either satisfies it);
the command paths that train check the installed one against ``SUPPORTED`` at start-up
(``require_supported``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ftrun.errors import BadInput
from ftrun.schedule import ReleaseBehaviour
from ftrun.torchft_compat.sources import torchft_source

DISTRIBUTIONS = ("torchft", "torchft-nightly")
# distribution -> (lowest version, first version not supported; None = no upper bound).
# torchft 0.2.x: the release ftrun was built on. torchft-nightly: from the first nightly
# checked (2026.10.26, reconfigure API); later nightlies are accepted (the adapter picks the API
# by what the installed torchft has, not by its version) and earlier ones refused (not checked).
SUPPORTED: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {
    "torchft": ((0, 2, 0), (0, 3)),
    "torchft-nightly": ((2026, 10, 26), None),
}


@dataclass(frozen=True)
class Release:
    """The installed torchft: ``distribution`` (``torchft`` | ``torchft-nightly``; None = none
    installed; several, space-separated, when more than one claims the files), its ``version``,
    its process-group API ``pg_api`` (``configure`` | ``reconfigure``; None = unknown) and torch's
    version (None = not installed)."""

    distribution: str | None
    version: str | None
    pg_api: str | None
    torch: str | None

    def describe(self) -> str:
        """``torchft-nightly 2026.10.26 (process groups: reconfigure), torch 2.13.0+cpu``."""
        ft = f"{self.distribution} {self.version}" if self.distribution else "torchft not installed"
        api = f" (process groups: {self.pg_api})" if self.pg_api else ""
        return f"{ft}{api}, torch {self.torch or 'not installed'}"

    def to_json(self) -> dict[str, str | None]:
        """What run dirs and reports record (manifest/meta ``versions``, sweep, compare)."""
        return {
            "torch": self.torch,
            "torchft": self.version,
            "torchft_distribution": self.distribution,
            "torchft_pg_api": self.pg_api,
        }


def _version_tuple(text: str) -> tuple[int, ...]:
    """``0.2.0`` -> (0, 2, 0); ``2026.10.26`` -> (2026, 10, 26); stops at the first non-number
    part (``0.2.1.dev3`` -> (0, 2, 1))."""
    out = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m[0]))
        if m.end() != len(part):
            break
    return tuple(out)


def pg_api_of_source(source: str) -> str | None:
    """The process-group API a ``torchft/process_group.py`` defines: ``reconfigure`` (the
    nightly's ``supports_reconfigure``/``reconfigure``), ``configure`` (0.2.x), else None."""
    if re.search(r"def supports_reconfigure\(", source) and re.search(r"def reconfigure\(", source):
        return "reconfigure"
    if re.search(r"def configure\(", source):
        return "configure"
    return None


def _pg_api_installed() -> str | None:
    """Read (not import: importing torchft imports torch) the installed process_group.py."""
    source = torchft_source("torchft.process_group")
    return None if source is None else pg_api_of_source(source)


def installed() -> Release:
    """The installed torchft and torch, from package metadata; torch-free."""
    from importlib import metadata

    found = []
    for dist in DISTRIBUTIONS:
        try:
            found.append((dist, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            pass
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    if not found:
        return Release(None, None, None, torch)
    return Release(" ".join(d for d, _ in found), " ".join(v for _, v in found), _pg_api_installed(), torch)


def versions(torch_version: str | None = None) -> dict[str, str | None]:
    """What ran, as run dirs and reports record it (``versions``): python, ftrun, torch
    (``torch_version`` when the caller imported torch, else its metadata) and the torchft release
    (``Release.to_json``)."""
    import platform

    from ftrun.version import __version__

    found = installed().to_json()
    if torch_version is not None:
        found["torch"] = torch_version
    return {"python": platform.python_version(), "ftrun": __version__, **found}


def describe_versions(versions: Mapping[str, str | None] | None) -> str | None:
    """``Release.describe()`` of a recorded ``versions`` (a manifest's: package -> version); None
    when it names no torchft (a run dir of an earlier ftrun may have only ``torchft``: the
    distribution is then unknown)."""
    torchft = versions.get("torchft") if versions else None
    if not versions or not torchft:
        return None
    rel = Release(
        versions.get("torchft_distribution") or "torchft",
        torchft,
        versions.get("torchft_pg_api"),
        versions.get("torch"),
    )
    return rel.describe()


def baby_pg_fails_commits(rel: Release) -> bool:
    """Whether this release's Baby process groups fail every commit: torchft 0.2.x's
    ``_ManagedWork`` callback late-binding bug (upstream PR #355), fixed in the nightly
    (torchft-notes "Known torchft 0.2.0 defects"). Reports use it to say why; tests, what to expect."""
    return rel.distribution == "torchft"


# What each release does after a failed ``should_commit`` (``ftrun.schedule.rounds``). Read in
# both releases' ``local_sgd.py`` (byte-identical: the fragment is ``current_step() % F`` at the
# send and at the sync; no retry logic) and ``manager.py`` (``start_quorum`` -> ``_async_quorum``:
# ``heal`` when the group's step is not the quorum's ``max_step``, then ``load_state_dict`` sets
# the step and, the quorum being synchronous, the state is applied before ``prepare_sync``;
# ``should_commit`` adds 1 to the step only on True). The heal is the same in both; they differ in
# the Baby process groups' commits (the ``_ManagedWork`` defect, ``baby_pg_fails_commits``).
TORCHFT_0_2_COMMITS = ReleaseBehaviour("torchft 0.2", heals_behind_groups=True, baby_pg_commits_fail=True)
TORCHFT_NIGHTLY_COMMITS = ReleaseBehaviour("torchft-nightly", heals_behind_groups=True, baby_pg_commits_fail=False)


def release_behaviour(distribution: str | None) -> ReleaseBehaviour:
    """The failed-commit behaviour of the release named ``distribution`` (a manifest's
    ``torchft_distribution``; None or unknown: 0.2's, whose heal the nightly shares)."""
    return TORCHFT_NIGHTLY_COMMITS if distribution == "torchft-nightly" else TORCHFT_0_2_COMMITS


def unsupported(rel: Release) -> str | None:
    """Why ftrun cannot run on ``rel`` (one line), or None when it is supported."""
    hint = (
        "install torchft 0.2.x (pip install 'torchft>=0.2.0,<0.3') "
        "or torchft-nightly (FTRUN_TORCHFT=nightly bash scripts/setup.sh)"
    )
    if rel.distribution is None:
        return f"torchft is not installed: {hint}"
    if " " in rel.distribution:
        return (
            f"torchft: both {rel.distribution.replace(' ', ' and ')} are installed ({rel.version}) and share the "
            "same files; uninstall both and install one of them (pip install --force-reinstall DIST)"
        )
    low, high = SUPPORTED[rel.distribution]
    v = _version_tuple(rel.version or "")
    supported = "0.2.x" if rel.distribution == "torchft" else f">= {'.'.join(map(str, low))}"
    if not v or v < low or (high is not None and v >= high):
        return (
            f"{rel.distribution} {rel.version} is not supported (ftrun supports {rel.distribution} {supported}); {hint}"
        )
    if rel.pg_api is None:
        import importlib.util

        if importlib.util.find_spec("torchft") is None:
            return (
                f"{rel.distribution} {rel.version} is installed but has no torchft package files (removed, e.g. by "
                f"uninstalling the other distribution); reinstall it: pip install --force-reinstall {rel.distribution}"
            )
        return f"{rel.distribution} {rel.version}: its process groups have neither configure nor reconfigure; {hint}"
    return None


def require_supported() -> Release:
    """The installed release, or ``BadInput`` (one line, exit 2) naming it when unsupported."""
    rel = installed()
    why = unsupported(rel)
    if why:
        raise BadInput(why)
    return rel
