"""``ftrun train`` input validation through the real CLI: one line on stderr, exit 2, nothing
started (that help and bad input import no torch: test_torch_free.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from train_fixtures import SMALL, one_line, run_ftrun, write_toml


def bad_toml(tmp: Path) -> Path:
    p = tmp / "bad.toml"
    p.write_text("steps = 10\nwidth = = 3\n")
    return p


def unknown_key_toml(tmp: Path) -> Path:
    p = tmp / "unknown.toml"
    p.write_text("steps = 10\nsync_evry = 5\n")
    return p


def not_a_dir(tmp: Path) -> str:
    f = tmp / "a_file"
    f.write_text("x")
    return str(f / "sub")  # parent is a file: not writable even as root


# (case id, flags, strings the single error line must contain). "{tmp}" is tmp_path.
CASES = [
    # torchft's DiLoCo rules
    ("F>H", ["--fragments", "4", "--sync-every", "2", "--blocks", "4"], ["--sync-every 2", "H >= F", "--fragments 4"]),
    ("H%F", ["--fragments", "2", "--sync-every", "5"], ["--sync-every 5", "multiple of F", "--fragments 2"]),
    (
        "tau>=H/F",
        ["--fragments", "2", "--sync-every", "6", "--fragment-sync-delay", "3"],
        ["--fragment-sync-delay 3", "6/2 = 3"],
    ),
    # a rule between flags is blamed on the flag given, not on the preset's value
    ("F vs preset tau", ["--fragments", "5"], ["--fragments 5:", "--fragment-sync-delay 5 (preset streaming)"]),
    ("tau<0", ["--fragment-sync-delay=-1"], ["--fragment-sync-delay -1"]),
    ("alpha>1", ["--fragment-update-alpha", "1.5"], ["--fragment-update-alpha 1.5"]),
    ("alpha<0", ["--fragment-update-alpha=-0.25"], ["--fragment-update-alpha -0.25"]),
    # ftrun's own
    (
        "F>blocks",
        ["--fragments", "4", "--sync-every", "8", "--fragment-sync-delay", "0", "--blocks", "2"],
        ["--fragments 4", "blocks (2)"],
    ),
    ("steps<H profiled", ["--steps", "5", "--sync-every", "20"], ["--steps 5", "--sync-every 20"]),
    (
        "profile past steps",
        ["--steps", "10", "--sync-every", "10", "--fragment-sync-delay", "1", "--profile", "1:50"],
        ["--profile 1:50"],
    ),
    ("bad profile", ["--profile", "sometimes"], ["--profile sometimes"]),
    ("profile B<A", ["--steps", "40", "--profile", "9:3"], ["--profile 9:3"]),
    ("unknown mode", ["--mode", "turbo"], ["--mode turbo", "streaming"]),
    ("bad toml", ["--config", "{bad_toml}"], ["--config {bad_toml}", "line 2"]),
    ("unknown toml key", ["--config", "{unknown_key_toml}"], ["--config {unknown_key_toml}", "sync_evry"]),
    ("missing toml", ["--config", "{tmp}/nope.toml"], ["--config {tmp}/nope.toml", "not found"]),
    ("missing data", ["--data", "{tmp}/missing.txt"], ["--data {tmp}/missing.txt"]),
    ("out not writable", ["--out", "{not_a_dir}"], ["--out {not_a_dir}", "not writable"]),
    ("bad model", ["--model", "lstm"], ["--model lstm"]),
    ("bad backend", ["--backend", "mpi"], ["--backend mpi"]),
    ("min_replicas>replicas", ["--replicas", "2", "--min-replicas", "3"], ["--min-replicas 3"]),
    ("zero replicas", ["--replicas", "0"], ["--replicas 0"]),
    ("nan lr", ["--inner-lr", "nan"], ["--inner-lr nan"]),
    ("bad run name", ["--run-name", "../escape"], ["--run-name ../escape"]),
    ("bad link", ["--link", "fast"], ["--link", "fast"]),
    ("link 1 bit/s", ["--link", "1"], ["--link '1'", "1kbit"]),
    ("empty mode", ["--mode", ""], ["--mode ''", "empty"]),
    ("empty out", ["--out", ""], ["--out ''", "empty"]),
    ("stall timeout", ["--stall-timeout", "0"], ["--stall-timeout 0"]),
    ("quorum timeout", ["--quorum-timeout", "-1"], ["--quorum-timeout -1"]),
    ("bad lighthouse", ["--lighthouse", "localhost:29510"], ["--lighthouse localhost:29510"]),
]


@pytest.mark.e2e
@pytest.mark.parametrize("case,flags,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2(tmp_path, case, flags, needles):
    subs = {
        "{tmp}": str(tmp_path),
        "{bad_toml}": str(bad_toml(tmp_path)),
        "{unknown_key_toml}": str(unknown_key_toml(tmp_path)),
        "{not_a_dir}": not_a_dir(tmp_path),
    }

    def sub(s: str) -> str:
        for k, v in subs.items():
            s = s.replace(k, v)
        return s

    flags = [sub(f) for f in flags]
    out = [] if "--out" in flags else ["--out", str(tmp_path / "runs")]
    res = run_ftrun("train", *flags, *out, *SMALL)
    one_line(res, *[sub(n) for n in needles])
    assert not (tmp_path / "runs").exists(), "nothing may be created for bad input"


@pytest.mark.e2e
def test_toml_values_are_type_checked(tmp_path):
    p = write_toml(tmp_path / "t.toml", {"steps": "many"})
    one_line(run_ftrun("train", "--config", str(p), "--out", str(tmp_path)), f"{p}: steps = 'many'", "int")
    p = tmp_path / "mode.toml"
    p.write_text('mode = ["streaming"]\n')
    one_line(run_ftrun("train", "--config", str(p), "--out", str(tmp_path)), f"{p}: mode =")
    p = tmp_path / "nan.toml"
    p.write_text("timeout_s = nan\n")
    one_line(run_ftrun("train", "--config", str(p), "--out", str(tmp_path)), f"{p}: timeout_s = nan")
    p = tmp_path / "binary.toml"
    p.write_bytes(b"\xff\xfe\x00steps")
    one_line(run_ftrun("train", "--config", str(p), "--out", str(tmp_path)), f"--config {p}")


@pytest.mark.e2e
def test_cli_config_then_flags(tmp_path):
    """Through the real CLI: a file value that is invalid is fixed by a flag, and vice versa."""
    p = write_toml(tmp_path / "c.toml", {"fragments": 2, "sync-every": 6, "fragment-sync-delay": 3})
    one_line(run_ftrun("train", "--config", str(p), "--out", str(tmp_path)), f"{p}: fragment-sync-delay = 3")
    res = run_ftrun(
        "train", "--config", str(p), "--fragment-sync-delay", "1", "--fragments", "4", "--out", str(tmp_path)
    )
    one_line(res, f"{p}: sync-every = 6", "--fragments 4")


@pytest.mark.e2e
def test_error_line_shows_brackets_verbatim(tmp_path):
    res = run_ftrun("train", "--profile", "[/]", "--out", str(tmp_path))
    one_line(res, "--profile [/]")
