"""``ftrun launch``'s numerics hook without starting a process: the sitecustomize shim and its
chain to the one it shadows, the import hook, the groups' PYTHONPATH, the ranks' statuses and
the reason numerics were not checked, torchft's fragment logger."""

from __future__ import annotations

import faulthandler
import importlib
import logging
import os
import sys
import types
from pathlib import Path

import pytest

from ftrun import layout
from ftrun.launch.autohook import attach, boot
from ftrun.launch.autohook.status import HookStatus, launch_numerics, status_file
from ftrun.launch.autohook.where import rank_of
from ftrun.torchft_compat import LOCAL_SGD_LOGGER, with_manager_pg


def test_hook_dir_holds_only_the_shim_and_goes_first_on_the_path(tmp_path):
    d = boot.write_hook_dir(tmp_path)
    assert [p.name for p in d.iterdir()] == ["sitecustomize.py"]
    assert "from ftrun.launch.autohook.boot import boot" in (d / "sitecustomize.py").read_text()
    assert boot.pythonpath(d, None) == str(d)
    assert boot.pythonpath(d, f"/a{os.pathsep}{os.pathsep}/b") == os.pathsep.join([str(d), "/a", "/b"])
    assert boot.pythonpath(d, os.pathsep.join([str(d), "/a"])) == os.pathsep.join([str(d), "/a"])  # not twice


def test_rank_of_needs_a_launched_ranks_environment():
    full = {"FTRUN_RUN_DIR": "/r", "REPLICA_GROUP_ID": "1", "RANK": "0"}
    assert rank_of(full) == (Path("/r"), 1, 0)
    assert rank_of({**full, "RANK": ""}) is None
    assert rank_of({k: v for k, v in full.items() if k != "RANK"}) is None  # torchrun's agent
    assert rank_of({**full, "REPLICA_GROUP_ID": "x"}) is None
    assert rank_of({**full, "FTRUN_RUN_DIR": ""}) is None


def test_a_launched_rank_dumps_its_python_stacks_on_a_fatal_signal(tmp_path, monkeypatch):
    """A rank killed by SIGABRT or SIGSEGV leaves every thread's stack in its group's log."""
    monkeypatch.setenv("FTRUN_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("REPLICA_GROUP_ID", "0")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(boot, "install", lambda patches: None)
    monkeypatch.setattr(boot, "chain", lambda here, path: None)
    was = faulthandler.is_enabled()  # pytest's own faulthandler plugin usually has it on
    faulthandler.disable()
    try:
        boot.boot(str(tmp_path / "sitecustomize.py"))
        assert faulthandler.is_enabled()
    finally:
        if was:
            faulthandler.enable()
        else:
            faulthandler.disable()


def _site(where: Path, marker: str) -> Path:
    where.mkdir(parents=True)
    (where / "sitecustomize.py").write_text(f"import sys\nsys.{marker} = True\n")
    return where


def test_chain_runs_the_sitecustomize_the_shim_shadows(tmp_path):
    shim = boot.write_hook_dir(tmp_path / "run")
    other = _site(tmp_path / "site-a", "_ftrun_test_chained_a")
    later = _site(tmp_path / "site-b", "_ftrun_test_chained_b")
    path = [str(shim), str(other), str(later)]
    spec = boot.next_sitecustomize(str(shim), path)
    assert spec is not None and Path(spec.origin or "").parent == other
    try:
        mod = boot.chain(str(shim), path)
        assert mod is not None and getattr(sys, "_ftrun_test_chained_a", False)
        assert not hasattr(sys, "_ftrun_test_chained_b")  # only the next one, as Python would
    finally:
        for k in ("_ftrun_test_chained_a", "_ftrun_test_chained_b"):
            if hasattr(sys, k):
                delattr(sys, k)


def test_chain_without_another_sitecustomize_does_nothing(tmp_path):
    shim = boot.write_hook_dir(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert boot.next_sitecustomize(str(shim), [str(shim), str(empty)]) is None
    assert boot.chain(str(shim), [str(shim), str(empty)]) is None


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A package ``ftrun_fake_tft`` with a module ``mod`` defining ``Thing``, on sys.path; the
    meta path restored afterwards."""
    pkg = tmp_path / "ftrun_fake_tft"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("class Thing:\n    value = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    yield "ftrun_fake_tft.mod"
    for name in ("ftrun_fake_tft.mod", "ftrun_fake_tft"):
        sys.modules.pop(name, None)


def test_import_hook_patches_a_module_once_it_has_run(fake_package):
    seen = []

    def patch(module):
        seen.append(module.__name__)
        module.Thing.value = 2  # the module ran first: its class exists

    finder = boot.install({fake_package: patch})
    assert sys.meta_path[0] is finder and boot.install({fake_package: patch}) is finder  # once
    mod = importlib.import_module(fake_package)
    assert seen == [fake_package] and mod.Thing.value == 2


def test_import_hook_patches_a_module_already_imported(fake_package):
    mod = importlib.import_module(fake_package)
    seen = []
    boot.install({fake_package: lambda m: seen.append(m)})
    assert seen == [mod]


def test_a_failing_patch_never_breaks_the_import(fake_package, capsys):
    def patch(module):
        raise RuntimeError("boom")

    boot.install({fake_package: patch})
    mod = importlib.import_module(fake_package)
    assert mod.Thing.value == 1
    assert "numerics hook failed on ftrun_fake_tft.mod" in capsys.readouterr().err


def test_manager_pg_is_replaced_by_position_or_name():
    wrap = lambda pg: ("wrapped", pg)  # noqa: E731
    assert with_manager_pg(("pg", 1), {"x": 2}, wrap) == ((("wrapped", "pg"), 1), {"x": 2})
    assert with_manager_pg((), {"pg": "pg", "x": 2}, wrap) == ((), {"pg": ("wrapped", "pg"), "x": 2})
    assert with_manager_pg((), {}, wrap) == ((), {})


def _status(run_dir: Path, s: HookStatus) -> None:
    p = status_file(run_dir, s.replica, s.rank)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(layout.to_json(s))


def test_numerics_reason_from_the_ranks_statuses(tmp_path):
    assert launch_numerics([tmp_path], "t.py") == (None, None)  # no hook in this run dir
    _status(tmp_path, HookStatus(0, 0, manager=True))
    on, why = launch_numerics([tmp_path], "t.py")
    assert on is False and why == "t.py built a torchft Manager but no DiLoCo or LocalSGD: no round to sketch"
    _status(tmp_path, HookStatus(1, 0, manager=True, local_sgd=True))
    on, why = launch_numerics([tmp_path], "t.py")
    assert on is False and why is not None and "LocalSGD" in why and "DiLoCo only" in why
    _status(tmp_path, HookStatus(1, 0, manager=True, error="DiLoCo: ValueError: x"))
    assert launch_numerics([tmp_path], "t.py")[1] == "the launch hook failed in replica 1 rank 0: DiLoCo: ValueError: x"
    _status(tmp_path, HookStatus(0, 0, manager=True, diloco=True))
    assert launch_numerics([tmp_path], "t.py") == (True, None)  # the event logs speak


def test_an_unreadable_status_is_left_out(tmp_path):
    p = status_file(tmp_path, 0, 0)
    p.parent.mkdir(parents=True)
    p.write_text('{"replica": 0, "ra')  # killed while writing
    assert launch_numerics([tmp_path], "t.py") == (None, None)


@pytest.fixture
def fragment_logger():
    logger = logging.getLogger(LOCAL_SGD_LOGGER)
    level, handlers, root = logger.level, list(logger.handlers), list(logging.getLogger().handlers)
    logging.getLogger().handlers = []
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(level)
    logger.handlers = handlers
    logging.getLogger().handlers = root


def test_fragment_lines_reach_stderr_once_when_the_script_logs_nothing(fragment_logger, capsys, monkeypatch):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # (pytest's own capture handler too)
    attach.raise_fragment_log()
    attach.raise_fragment_log()  # one handler, whatever the calls
    assert fragment_logger.getEffectiveLevel() == logging.INFO
    assert sum(isinstance(h, attach._UnlessHandled) for h in fragment_logger.handlers) == 1
    fragment_logger.info("Preparing fragment=1 step=1")
    logging.getLogger("torchft.manager").info("not raised: only local_sgd's logger")
    err = capsys.readouterr().err
    assert err.count("Preparing fragment=1 step=1") == 1 and "not raised" not in err


def test_fragment_lines_go_through_the_scripts_own_logging(fragment_logger, capsys, monkeypatch):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    attach.raise_fragment_log()
    got: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            got.append(record.getMessage())

    logging.getLogger().addHandler(Keep())
    fragment_logger.info("Syncing fragment=0 step=2 manager_step=0")
    assert got == ["Syncing fragment=0 step=2 manager_step=0"]
    assert "Syncing" not in capsys.readouterr().err  # not twice


def test_a_debug_level_is_not_lowered(fragment_logger):
    fragment_logger.setLevel(logging.DEBUG)
    attach.raise_fragment_log()
    assert fragment_logger.level == logging.DEBUG


def test_outside_a_launched_rank_there_is_no_hook(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(attach, "_HOOK", None)
    assert attach.current() is None


def test_classes_are_wrapped_once_and_still_construct(monkeypatch):
    monkeypatch.setattr(attach, "_HOOK", None)
    monkeypatch.delenv("RANK", raising=False)  # no hook here: the wrappers pass through
    made = []

    class Manager:
        def __init__(self, pg, x=0):
            made.append((pg, x))

    mod = types.SimpleNamespace(Manager=Manager)
    attach.patch("torchft.manager", mod)  # type: ignore[arg-type]
    wrapped = Manager.__init__
    attach.patch("torchft.manager", mod)  # type: ignore[arg-type]
    assert Manager.__init__ is wrapped
    Manager("pg", x=3)
    assert made == [("pg", 3)]


def test_each_group_gets_the_hook_first_on_its_path_the_callers_entries_after(tmp_path):
    from ftrun.config.commands import LaunchOptions
    from ftrun.launch.script import LaunchSpec, script_group

    script = tmp_path / "train.py"
    script.write_text("")
    sched = dict(fragments=2, sync_every=4, fragment_sync_delay=1)
    run = tmp_path / "run"
    hook = str((run / boot.HOOK_DIR).resolve())
    spec = LaunchSpec.build([str(script)], LaunchOptions(**sched))
    g = script_group(spec, run, 0, "http://x:1", None, base_env={"PYTHONPATH": "/patched"})
    assert g.env["PYTHONPATH"] == os.pathsep.join([hook, "/patched"])
    g = script_group(spec, run, 0, "http://x:1", None, base_env={})
    assert g.env["PYTHONPATH"] == hook
    # --env's, after the hook too
    spec = LaunchSpec.build([str(script)], LaunchOptions(env=["PYTHONPATH=/mine"], **sched))
    g = script_group(spec, run, 1, "http://x:1", None, base_env={"PYTHONPATH": "/callers"})
    assert g.env["PYTHONPATH"] == os.pathsep.join([hook, "/mine"])


def test_the_manifest_lists_the_event_logs_the_hook_wrote(tmp_path):
    from ftrun.launch.script import event_log_refs

    assert event_log_refs(tmp_path) == []
    for name in ("replica1_rank0.jsonl", "replica0_rank0.jsonl", "run.jsonl"):
        (tmp_path / layout.EVENT_LOGS).mkdir(exist_ok=True)
        (tmp_path / layout.EVENT_LOGS / name).write_text("")
    refs = event_log_refs(tmp_path)
    assert [(e.replica, e.rank, e.path) for e in refs] == [
        (0, 0, "events/replica0_rank0.jsonl"),
        (1, 0, "events/replica1_rank0.jsonl"),
    ]


def test_a_relaunched_incarnation_is_held_to_its_own_rounds_not_its_predecessors():
    """``ftrun launch``'s relaunched group: new parameters (its script's, or a heal's) and records
    with no step (its loop counts from 1 again); its first round is not compared with the last
    commit of the incarnation before it, and the rounds are ordered by manager step."""
    import msgspec

    from ftrun.check.numerics import check_numerics
    from tests.unit.test_numerics_outer import causes, simulate

    logs = simulate(rounds=3, loaded=1)  # replica 1's state from round 1 on is new (no heal record)
    assert causes(check_numerics(logs, sketches_on=True)), "the same logs as one incarnation: a problem"
    relaunched = [
        msgspec.structs.replace(r, restart=1, step=None) if r.numerics and r.numerics[0].manager_step >= 1 else r
        for r in logs[(1, 0)]
    ]
    out = check_numerics({**logs, (1, 0): relaunched}, sketches_on=True)
    assert out.ok, out.texts()
    assert out.checked == 3 and out.stages["outer step"].checked == 3, out.stages  # 2 + 1 (its 1st round)


def test_replicas_averaging_different_fragments_are_named_as_such():
    """Issue 40 item 3 seen by the numeric check: in one round replica 1 sent fragment 1 while
    replica 0 sent fragment 0 (equal sizes: one collective); neither round has both sends."""
    import msgspec

    from ftrun.check.numerics import check_numerics
    from tests.unit.test_numerics_outer import part, rec, sk, vec

    logs = {}
    for r, frag in ((0, 0), (1, 1)):
        send = msgspec.structs.replace(part("send", 0, contribution=sk(vec(r))), fragment=frag)
        sync = msgspec.structs.replace(part("sync", 0, sum=sk(vec(5)), average=sk(vec(6))), fragment=frag)
        logs[(r, 0)] = [rec(5, [send]), rec(10, [sync], commit=True, manager_step_after=1, synced=frag)]
    out = check_numerics(logs, sketches_on=True)
    assert [(p.replica, p.cause) for p in out.problems] == [
        (
            0,
            "replicas averaged different fragments in one collective (replica 1 sent fragment 1; torchft's "
            "fragment order differs)",
        ),
        (
            1,
            "replicas averaged different fragments in one collective (replica 0 sent fragment 0; torchft's "
            "fragment order differs)",
        ),
    ], out.texts()
