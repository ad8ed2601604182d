"""compare's timeline with --repeat says which repeat it draws (issue 42)."""

from __future__ import annotations

import shutil

import pytest

from ftrun import layout
from ftrun.comparison.outputs import outputs
from ftrun.report import timeline
from train_fixtures import two_runs


class _Drawn(Exception):
    pass


@pytest.mark.parametrize("repeats", [1, 2])
def test_the_timeline_title_names_the_repeat_drawn(tmp_path, monkeypatch, repeats):
    a, b = two_runs(tmp_path)
    dirs = [[a], [b]]
    for k in range(1, repeats):
        for reps in dirs:
            shutil.copytree(reps[0], reps[0].with_name(f"{reps[0].name}-{k + 1}"))
            reps.append(reps[0].with_name(f"{reps[0].name}-{k + 1}"))
    titles = []

    def drawn(lanes, path, title, **kw):
        titles.append(title)
        raise _Drawn

    monkeypatch.setattr(timeline, "draw", drawn)
    with pytest.raises(_Drawn):
        outputs(["runA", "runB"], dirs, tmp_path / "cmp", layout.CompareLink(describe="none"), None)
    if repeats == 1:
        assert "repeat" not in titles[0], titles
    else:
        assert titles[0].endswith("· repeat 1 of 2 drawn (each configuration's first run)"), titles
    assert not (tmp_path / "cmp").exists()  # the failed compare left no dir holding only its marker
