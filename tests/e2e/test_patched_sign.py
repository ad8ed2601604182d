"""A real torchft bug, not an injected fault (issue 41 item 1): torchft 0.2.0's pseudo-gradient with
its sign flipped (``local - original`` instead of ``original - local`` in ``local_sgd.py``), in a
copy of the installed package first on the workers' ``PYTHONPATH`` (the venv is never modified).
The average of wrong contributions is still their average; only the outer step's sketches see it.
Both ``ftrun train`` and ``ftrun launch`` of ``tests/torchft_example.py`` exit 1 naming "sign
flipped". The same runs unpatched pass in ``test_corrupt_sync.py`` (train, this shape) and
``test_launch_numerics.py`` (launch, this shape)."""

from __future__ import annotations

import pytest
from test_corrupt_sync import RUN
from test_launch_numerics import SCHED, SCRIPT, launch

from ftrun import layout
from train_fixtures import NATIVE_CRASH, flat, patched_torchft, run_train

pytestmark = pytest.mark.e2e

# torchft 0.2.0's DiLoCo._save_grads: pseudogradient = original - local_param
SIGN_FLIPPED = (
    "self.original_parameters[name].to(p.device) - local_param",
    "local_param - self.original_parameters[name].to(p.device)",
)
CAUSE = "sign flipped: the contribution is local - original"


@pytest.fixture(scope="module")
def sign_flipped(tmp_path_factory) -> dict[str, str]:
    return patched_torchft(tmp_path_factory.mktemp("torchft-sign"), "local_sgd.py", *SIGN_FLIPPED)


def test_patched_sign_fails_train_naming_it(tmp_path, sign_flipped):
    run = run_train(tmp_path, "sign", *RUN, env=sign_flipped, timeout=240)
    assert run.rc == 1, run.explain()
    err = run.stderr.strip().splitlines()[-1]
    assert "numerics: sync step " in err and f"likely cause: {CAUSE}" in err, err
    problems = run.summary()["numerics"]["problems"]
    # every replica's every contribution is flipped: both replicas named, each as the pseudo-gradient
    assert {p["replica"] for p in problems} == {0, 1}, problems
    assert all(CAUSE in p["cause"] for p in problems), problems


@NATIVE_CRASH  # torchft's example script: a SIGSEGV seen once in its Gloo run
def test_patched_sign_fails_launch_naming_it(tmp_path, sign_flipped):
    rc, out, explain = launch(tmp_path, "sign", *SCHED, "--", str(SCRIPT), "--manager-steps", "6", env=sign_flipped)
    assert rc == 1, explain
    s = layout.read_launch_summary(tmp_path / "sign")
    assert s.check is not None and s.check.verdict == "fail" and s.check.line is not None, explain
    line = flat(s.check.line)
    assert line.startswith("FAIL ") and "first: numerics: sync step" in line and CAUSE in line, line
    problems = (s.inspection or {})["numerics"]["problems"]
    assert problems and all(CAUSE in p["cause"] for p in problems), problems
    assert {p["replica"] for p in problems} == {0, 1}, problems
