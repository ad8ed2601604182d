"""The README stays the three-minute version and the docs site stays whole (issue 43).

The README holds the two set-up commands exactly as CI and newcomers run them and stays under
its line limit; every page in ``docs/`` is in ``mkdocs.yml``'s nav and every nav entry is a
page; the README's links into ``docs/`` resolve; ``scripts/check_prose.py`` (run by
``scripts/lint.sh``) refuses measurement-diary phrases and passes the tree as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from train_fixtures import load_script

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 250
SETUP_COMMANDS = (
    "bash scripts/demo.sh    # installs into .venv, then: ftrun compare streaming baseline "
    "(about a minute on 2 CPU cores)",
    "bash scripts/test.sh    # installs into .venv, then: pytest (the whole suite; CI runs this, "
    "then a torchft-nightly leg)",
)


def _check_prose():
    return load_script("check_prose")


check_prose = _check_prose()


def nav_pages() -> list[str]:
    """The pages ``mkdocs.yml``'s nav names (``- Title: page.md``), in order; read without YAML
    (the docs extra is not needed to run the unit tests)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:") :]
    return re.findall(r"^\s+- [^:\n]+:\s+(\S+\.md)\s*$", nav, flags=re.MULTILINE)


def test_readme_holds_the_two_setup_commands_and_stays_short():
    text = README.read_text()
    lines = text.splitlines()
    for command in SETUP_COMMANDS:
        assert command in lines, f"README lost its set-up line: {command}"
    assert len(lines) <= README_MAX_LINES, f"README has {len(lines)} lines (limit {README_MAX_LINES}): move it to docs/"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash scripts/test\.sh\b", ci, flags=re.MULTILINE), "CI no longer runs the README's test command"


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    nav = nav_pages()
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert len(nav) == len(set(nav)), f"a page is in the nav twice: {nav}"
    assert sorted(nav) == pages, (
        f"not in the nav: {sorted(set(pages) - set(nav))}; in the nav, no such page: {sorted(set(nav) - set(pages))}"
    )
    for page in ("index.md", "cli.md", "benchmarks.md"):
        assert page in nav


def test_readme_links_into_docs_resolve():
    targets = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    assert targets, "the README links into docs/"
    missing = sorted({t for t in targets if not (ROOT / t).is_file()})
    assert not missing, missing


def test_lint_runs_the_prose_check_and_the_strict_docs_build():
    lint = (ROOT / "scripts" / "lint.sh").read_text()
    assert "scripts/check_prose.py" in lint
    assert 'check "mkdocs build --strict"' in lint and "--strict" in lint


@pytest.mark.parametrize(
    "line",
    [
        "Measured this session: 0.47 ms per sync.",
        "The last session's final tree passed 8 of 8.",
        "Before that: 31.7x on a slower machine.",
        "7 of 8 rows pass (load 0.8–1.7 around its trainings).",
        "run after run while other jobs ran, load 2.1–2.9, ms per step",
        "25.8x earlier, at load 3 (0.123 / 3.18 s).",
        "**2026-12-02, the final tree**: 33.5x",
        "numbers measured today on the CI box",
        "not run yet, no GPU was lent.",
    ],
)
def test_prose_check_refuses_diary_phrases(line, tmp_path):
    hits = check_prose.check_text(f"# page\n\n{line}\n", tmp_path / "page.md")
    assert hits and all(h.line == 3 for h in hits), (line, hits)
    assert "benchmarks.md" in str(hits[0])


@pytest.mark.parametrize(
    "line",
    [
        "pytest keeps the run dirs of failed tests, listed at the end of the session.",
        "torchft-nightly==2026.10.26 is the nightly ftrun supports.",
        "DIR/load.json keeps the machine's load before and after each link's training.",
        "a collective issued before the other ended",
        "Measured figures: [benchmarks](benchmarks.md).",
    ],
)
def test_prose_check_passes_plain_prose(line, tmp_path):
    assert check_prose.check_text(line, tmp_path / "page.md") == []


def test_prose_check_exempts_the_generated_benchmarks_page(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "benchmarks.md").write_text("| inspect | 33.5x | 2026-12-02, load 0.6 |\n")
    (docs / "page.md").write_text("Before that: 31.7x.\n")
    assert [f.name for f in check_prose.files_of([docs])] == ["page.md"]
    assert check_prose.main([str(docs / "page.md")]) == 1
    assert check_prose.main([str(tmp_path / "missing.md")]) == 2


def test_readme_and_docs_hold_no_diary_phrases(capsys):
    assert check_prose.main([]) == 0, capsys.readouterr().out


# --- the docs' pictures (scripts/gen_docs_figures.py; its --check runs in scripts/lint.sh) ---------


@pytest.fixture(scope="module")
def figs():
    return load_script("gen_docs_figures")


def test_every_picture_is_checked_in_small_and_shown_on_its_page(figs):
    assert figs.reference_problems() == []
    for fig in figs.FIGURES:
        path = DOCS / "img" / fig.name
        assert path.is_file(), f"docs/img/{fig.name} missing: run python scripts/gen_docs_figures.py"
        assert 0 < path.stat().st_size <= figs.MAX_BYTES
        w, h = figs.png_size(path)
        assert w > 0 and h > 0, f"docs/img/{fig.name} is not a PNG"
    assert (DOCS / "img" / "src" / "sweep.json").is_file(), "the sweep picture's input (a real sweep.json)"
    assert figs.recorded_problems() == []  # a benchmark's picture: kept, small, a PNG
    for fig in figs.RECORDED:
        assert figs.png_size(DOCS / "img" / fig.name) != (0, 0), f"docs/img/{fig.name} is not a PNG"


def test_a_page_showing_a_missing_picture_or_missing_its_own_is_named(figs, tmp_path, monkeypatch):
    (tmp_path / "compare.md").write_text("![t](img/timeline.png)\n![gone](img/gone.png)\n")
    (tmp_path / "sweep.md").write_text("no picture\n")
    (tmp_path / "plan.md").write_text("![p](img/plan.png)\n")
    (tmp_path / "faults-and-recovery.md").write_text("no picture\n")
    (tmp_path / "img").mkdir()
    for name in ("timeline.png", "plan.png"):
        (tmp_path / "img" / name).write_bytes(b"")
    monkeypatch.setattr(figs, "DOCS", tmp_path)
    assert figs.reference_problems() == [
        "docs/compare.md: shows img/gone.png, which is not in docs/img/",
        "docs/sweep.md: does not show img/sweep.png (![...](img/sweep.png))",
        "docs/faults-and-recovery.md: does not show img/chaos_timeline.png (![...](img/chaos_timeline.png))",
    ]


def test_a_recorded_picture_missing_or_too_large_is_named_with_the_benchmark_that_records_it(
    figs, tmp_path, monkeypatch
):
    monkeypatch.setattr(figs, "IMG", tmp_path)
    assert figs.recorded_problems() == [
        "docs/img/chaos_timeline.png: missing (run python scripts/gen_benchmarks_page.py --run chaos)"
    ]
    (tmp_path / "chaos_timeline.png").write_bytes(b"x" * (figs.MAX_BYTES + 1))
    assert figs.recorded_problems() == [
        f"docs/img/chaos_timeline.png: {figs.MAX_BYTES + 1} bytes, over {figs.MAX_BYTES}"
    ]


def test_png_size_reads_the_header_and_refuses_what_is_not_a_png(figs, tmp_path):
    import struct

    png = tmp_path / "a.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0d" + b"IHDR" + struct.pack(">II", 640, 480) + b"\x08\x06")
    assert figs.png_size(png) == (640, 480)
    (tmp_path / "b.png").write_text("not a png")
    assert figs.png_size(tmp_path / "b.png") == (0, 0)


def test_lint_checks_the_pictures():
    assert "scripts/gen_docs_figures.py --check" in (ROOT / "scripts" / "lint.sh").read_text()


# --- the reference pages hold every field and problem class the code has --------------------------


def test_output_layout_names_every_field_of_the_summaries_and_the_sweep_cell():
    import msgspec

    from ftrun import layout

    page = (DOCS / "output-layout.md").read_text()
    structs = (
        layout.TrainSummary,
        layout.ReplicaSummary,
        layout.AgreementSummary,
        layout.RunCheck,
        layout.LaunchSummary,
        layout.LaunchGroupRow,
        layout.LaunchTrace,
        layout.FiredKill,
        layout.SweepCell,
    )
    missing = [
        f"{s.__name__}.{f.name}" for s in structs for f in msgspec.structs.fields(s) if f"`{f.encode_name}`" not in page
    ]
    assert not missing, f"docs/output-layout.md does not name: {missing}"


def test_reading_a_verdict_names_every_run_problem_class():
    sources = "".join(p.read_text() for p in (ROOT / "ftrun" / "check").glob("*.py"))
    classes = set(re.findall(r'by_class\["([^"]+)"\]', sources))
    classes |= set(re.findall(r'RunProblems\(\{"(\w+)"', sources))
    assert {"traces", "agreement", "commits", "numbering", "fragment log"} <= classes, classes
    page = (DOCS / "reading-a-verdict.md").read_text()
    assert not [c for c in sorted(classes) if f"`{c}`" not in page]
