"""scripts/slurm_ftrun.sbatch on a real Slurm: ``scripts/slurm_local.sh`` brings up a throw-away
two-node cluster on this machine (Debian's slurm-wlm + munge, two ``slurmd -N``), the README's
CPU submission line runs unchanged from a submit directory, and the job's exit code and merged
verdict are checked; a ``scancel`` mid-run must leave no process behind.

Needs root and slurm-wlm + munge (skipped with the reason otherwise; ``.ci/run`` installs them).
The nodes share this machine's network stack (NodeAddr 127.0.0.1): what crosses real network
stacks is tests/test_hosts_netns.py. About 40 s on 2 shared cores.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from train_fixtures import FTRUN, ROOT

pytestmark = pytest.mark.e2e


def readme_sbatch_lines() -> list[str]:
    text = (ROOT / "docs" / "hosts.md").read_text()
    section = text[text.index("## Slurm") :]
    block = section[section.index("```") + 3 :]
    block = block[: block.index("```")]
    return [ln.split("#")[0].strip() for ln in block.splitlines() if ln.startswith("sbatch ")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (slurmd)")
    missing = [x for x in ("sbatch", "slurmctld", "slurmd", "munged", "scontrol") if shutil.which(x) is None]
    if missing:
        pytest.skip(f"needs slurm-wlm and munge ({', '.join(missing)} not found)")
    state = tmp_path_factory.mktemp("slurm")
    up = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm_local.sh"), "up", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        env = dict(os.environ, SLURM_CONF=str(state / "slurm.conf"))
        if len(FTRUN) == 1:
            env["FTRUN"] = FTRUN[0]  # the submit dir has no .venv; the script also honours PATH
        submit = tmp_path_factory.mktemp("submit")
        (submit / "scripts").symlink_to(ROOT / "scripts")  # the README's line names scripts/...
        yield env, submit, state
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "slurm_local.sh"), "down", str(state)], timeout=120)
        left = _daemons(state)
        assert not left, f"daemons left running: {left}"


def _daemons(state: Path) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(state) in cmd:
                out.append(f"{d.name} {cmd}")
    return out


def _job(env: dict, job: str) -> dict:
    r = subprocess.run(["scontrol", "show", "job", job, "-o"], env=env, capture_output=True, text=True, timeout=30)
    return dict(kv.split("=", 1) for kv in r.stdout.split() if "=" in kv)


def _wait(env: dict, job: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _job(env, job)
        if info.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return info
        time.sleep(0.5)
    raise AssertionError(f"job {job} not done after {timeout} s: {_job(env, job)}")


def _submit(env: dict, cwd: Path, line: str) -> str:
    r = subprocess.run(line.split(), cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return re.search(r"Submitted batch job (\d+)", r.stdout)[1]


def test_readme_cpu_line_trains_two_nodes_and_exits_with_the_verdict(slurm) -> None:
    env, submit, _ = slurm
    cpu = readme_sbatch_lines()[0]
    assert cpu == "sbatch --nodes=2 scripts/slurm_ftrun.sbatch --steps 40"
    t0 = time.monotonic()
    job = _submit(env, submit, cpu)
    info = _wait(env, job, 300)
    wall = time.monotonic() - t0
    out = (submit / f"ftrun-{job}.out").read_text(errors="replace")
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), out[-3000:]
    flat = re.sub(r"\s+", " ", out)
    assert f"job slurm-{job}: 2 run dirs merged" in flat
    assert re.search(r"fingerprints: replicas agreed after [1-9]\d* commit", flat)
    assert out.rstrip().splitlines()[-1].startswith("PASS")
    assert "2 node(s) x 1 rank(s)" in out
    for noise in ("CANCELLED", "srun: error", "exit code 130", "Terminated"):
        assert noise not in out, out[-3000:]
    print(f"\nslurm: `{cpu}` wall {wall:.1f} s (submit to done), verdict: {out.rstrip().splitlines()[-1]}")


def test_a_failing_inspection_is_the_jobs_exit_code(slurm) -> None:
    env, submit, _ = slurm
    job = _submit(env, submit, "sbatch --nodes=2 scripts/slurm_ftrun.sbatch --steps 20 --profile none")
    info = _wait(env, job, 300)
    out = (submit / f"ftrun-{job}.out").read_text(errors="replace")
    # trained fine, but no traces to check: inspect-trace's bad-input code, not a PASS
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "2:0"), out[-3000:]


def test_scancel_mid_run_leaves_no_process(slurm) -> None:
    env, submit, _ = slurm
    job = _submit(env, submit, "sbatch --nodes=2 scripts/slurm_ftrun.sbatch --steps 5000 --profile none")
    deadline = time.monotonic() + 120
    run = submit / "profiles" / f"slurm-{job}-group1" / "events"
    while time.monotonic() < deadline and not (
        run.is_dir() and any(p.stat().st_size for p in run.glob("replica*.jsonl"))
    ):
        time.sleep(0.5)
    assert run.is_dir(), (submit / f"ftrun-{job}.out").read_text(errors="replace")[-3000:]
    subprocess.run(["scancel", job], env=env, check=True, timeout=30)
    _wait(env, job, 120)
    deadline = time.monotonic() + 30
    while True:
        left = _procs(f"slurm-{job}") + _procs(f"job{int(job):05d}") + _procs("--bind 0.0.0.0:29510")
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, left


def _procs(marker: str) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in cmd and state != "Z":
                out.append(f"{d.name} {cmd}")
    return out
