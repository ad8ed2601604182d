"""ftrun's pytest plugin, tested with ``pytester`` (inner sessions in this process, no process
started): it is loaded from its entry point, assert_schedule's message is the failing rows,
ftrun_train's config and marker, --ftrun-keep. ftrun_train's real training: examples/."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import ftrun.api  # noqa: F401  (imported here, so the inner sessions share it with this one)

pytest_plugins = ["pytester"]

DATA = Path(__file__).parent.parent / "data" / "cpu_run"
HELPERS = str(Path(__file__).parent.parent)


def test_loaded_from_its_entry_point(pytester):
    res = pytester.runpytest("--help")
    res.stdout.fnmatch_lines(["*--ftrun-keep*"])
    res = pytester.runpytest("--markers")
    res.stdout.fnmatch_lines(["@pytest.mark.ftrun:*"])
    res = pytester.runpytest("-p", "no:ftrun", "--help")
    assert "--ftrun-keep" not in res.stdout.str()


def test_assert_schedule_failure_is_the_table_of_failing_rows(pytester, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA, run)
    pytester.makepyfile(f"""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, {HELPERS!r})
        import ftrun
        from ftrun.pytest_plugin import assert_schedule
        from train_fixtures import move_send, read, write

        RUN = Path({str(run)!r})

        def test_passes_on_the_stored_run():
            assert_schedule(ftrun.check_traces({str(DATA)!r}))
            assert_schedule(ftrun.Run({str(DATA)!r}))

        def test_moved_send():
            f = RUN / json.loads((RUN / "manifest.json").read_text())["traces"][0]["path"]
            d = read(f)
            move_send(d, 25)
            write(f, d)
            assert_schedule(ftrun.check_traces(RUN))
    """)
    res = pytester.runpytest("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(
        [
            "*AssertionError: ftrun: schedule check failed, 3 problem(s) (F=2 H=20 tau=5):",
            "E*replica  rank  kind  step   fragment  problem",
            "E*0        0     send  25→26  0         send of fragment 0 expected at step 25, observed at step 26",
            "E*cross-replica: replicas disagree on the send at step 25*",
        ]
    )


FAKE_TRAIN = """
    import json
    import pytest
    import ftrun.api

    SEEN = []

    @pytest.fixture(autouse=True)
    def fake_train(monkeypatch):
        def train(config, out=None, **kw):  # what ftrun_train hands to ftrun.api.train
            SEEN.append(config)
            d = out / config["run_name"]
            d.mkdir()
            (d / "config.json").write_text(json.dumps(config))
            return ftrun.api.Run(d)
        monkeypatch.setattr(ftrun.api, "train", train)
"""

TWO_TESTS = """
    import json

    def test_good(ftrun_train):
        print("RUN", ftrun_train.path)
        assert json.loads((ftrun_train.path / "config.json").read_text())["steps"] == 16

    def test_bad(ftrun_train):
        print("RUN", ftrun_train.path)
        assert False, "the schedule was wrong"
"""


def _run_dirs(res) -> list[Path]:
    """The run dirs the inner tests printed (``RUN PATH``, with -s: maybe after the file name)."""
    return [Path(m) for m in re.findall(r"RUN (\S+)", res.stdout.str())]


def test_keep_keeps_failed_tests_run_dirs_only(pytester):
    pytester.makeconftest(FAKE_TRAIN)
    pytester.makepyfile(TWO_TESTS)
    res = pytester.runpytest("-p", "no:cacheprovider", "-s", "--ftrun-keep")
    res.assert_outcomes(passed=1, failed=1)
    good, bad = _run_dirs(res)
    assert not good.exists() and bad.is_dir() and (bad / "config.json").is_file()
    res.stdout.fnmatch_lines(
        ["*ftrun: run dirs of failed tests kept*", f"test_keep_keeps_failed_tests_run_dirs_only.py::test_bad: {bad}"]
    )


def test_without_keep_every_run_dir_goes(pytester):
    pytester.makeconftest(FAKE_TRAIN)
    pytester.makepyfile(TWO_TESTS)
    res = pytester.runpytest("-p", "no:cacheprovider", "-s")
    res.assert_outcomes(passed=1, failed=1)
    dirs = _run_dirs(res)
    assert len(dirs) == 2 and not any(p.exists() for p in dirs)
    res.stdout.fnmatch_lines(["ftrun: 1 failed test(s) trained; rerun with --ftrun-keep to keep their run dirs"])


def test_config_override_indirect_params_and_marker(pytester):
    pytester.makeconftest(FAKE_TRAIN)
    pytester.makepyfile("""
        import pytest
        from conftest import SEEN

        @pytest.fixture(params=["gloo", "baby-gloo"])
        def ftrun_config(request):
            return {"backend": request.param, "steps": 16}

        def test_backend(ftrun_train, ftrun_config):
            assert SEEN[-1] == {**ftrun_config, "run_name": "run", "check": False}  # the test checks it

        @pytest.mark.parametrize("ftrun_train", [{"steps": 24}], indirect=True)
        def test_indirect(ftrun_train):
            assert SEEN[-1]["steps"] == 24

        def test_not_training():
            pass
    """)
    # ftrun_config's params reach every test of ftrun_train: 2 + 2 (indirect, each backend) + 1
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=5)
    res = pytester.runpytest("-p", "no:cacheprovider", "-m", "not ftrun")
    res.assert_outcomes(passed=1, deselected=4)


def test_default_config_is_small_and_valid():
    from ftrun import api
    from ftrun.pytest_plugin import SMALL_CONFIG

    cfg = api.config_of(dict(SMALL_CONFIG))
    assert cfg.steps <= 16 and cfg.model.width <= 32 and cfg.hosts.replicas == 2 and cfg.profile_window() == (9, 16)


def test_assert_numerics_never_passes_silently(pytester):
    pytester.makepyfile(f"""
        import pytest
        import ftrun
        from ftrun.pytest_plugin import NotChecked, assert_numerics

        def test_warns_without_the_check():
            with pytest.warns(NotChecked, match="numerics not checked"):
                assert_numerics(ftrun.check_traces({str(DATA)!r}))

        def test_required_fails():
            assert_numerics(ftrun.check_traces({str(DATA)!r}), required=True)
    """)
    res = pytester.runpytest("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*AssertionError: ftrun: numerics not checked*"])


def test_a_wrong_argument_is_a_type_error():
    from ftrun.pytest_plugin import assert_schedule

    with pytest.raises(TypeError, match="expected an ftrun Report or Run"):
        assert_schedule({"verdict": "pass"})
