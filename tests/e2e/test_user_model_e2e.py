"""``ftrun train --model MODULE:FACTORY`` end to end: a factory module in a temporary directory."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import textwrap

import pytest

from train_fixtures import FTRUN

pytestmark = pytest.mark.e2e

MINE = textwrap.dedent("""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self, vocab_size, width, depth):
            super().__init__()
            self.emb = nn.Embedding(vocab_size, width)
            self.blocks = nn.ModuleList(nn.Linear(width, width + 4 * (i + 1)) if i == 0 else
                                        nn.Linear(width + 4 * i, width + 4 * (i + 1)) for i in range(depth))
            self.head = nn.Linear(width + 4 * depth, vocab_size)

        def forward(self, tokens):
            x = self.emb(tokens)
            for b in self.blocks:
                x = torch.tanh(b(x))
            return self.head(x)

    def make(vocab_size, seq_len, width=16, depth=2):
        return Net(vocab_size, width, depth)
""")

TRAIN = [
    "--fragments",
    "2",
    "--sync-every",
    "4",
    "--fragment-sync-delay",
    "1",
    "--steps",
    "12",
    "--seq-len",
    "16",
    "--batch-size",
    "4",
]


def test_user_factory_from_a_temporary_directory(tmp_path):
    (tmp_path / "mine.py").write_text(MINE)
    out = tmp_path / "runs"
    r = subprocess.run(
        [
            *FTRUN,
            "train",
            "--model",
            "mine:make",
            "--model-arg",
            "depth=4",
            *TRAIN,
            "--out",
            str(out),
            "--run-name",
            "mine",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "warning" not in r.stderr  # distinct block widths: fragments are told apart
    m = json.loads((out / "mine" / "manifest.json").read_text())
    assert m["config"]["model"]["model"] == "mine:make" and m["config"]["model"]["model_args"] == ["depth=4"]
    names = [[p["name"] for p in f["params"]] for f in m["fragments"]]
    assert names[0][0] == "emb.weight" and names[0][-1] == "blocks.1.bias"
    assert names[1][0] == "blocks.2.weight" and names[1][-2:] == ["head.weight", "head.bias"]
    again = subprocess.run(
        [*FTRUN, "inspect-trace", str(out / "mine"), "--json"], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert json.loads(again.stdout)["verdict"] == "pass"


def test_bad_factory_is_refused_before_launch(tmp_path):
    (tmp_path / "broken.py").write_text("import torch\nraise ImportError('needs a GPU library we lack')\n")
    r = subprocess.run(
        [*FTRUN, "train", "--model", "broken:make", *TRAIN, "--out", str(tmp_path / "runs")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["error: --model broken:make: cannot import broken: ImportError: needs a GPU library we lack"]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing launched


@pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed (.venv/bin/pip install -e '.[hf]')",
)
def test_hugging_face_config_offline(tmp_path):
    r = subprocess.run(
        [
            *FTRUN,
            "train",
            "--model",
            "hf:gpt2",
            "--model-arg",
            "n_layer=4",
            "--model-arg",
            "n_embd=32",
            "--model-arg",
            "n_head=2",
            *TRAIN,
            "--out",
            str(tmp_path),
            "--run-name",
            "hf",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=None,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((tmp_path / "hf" / "manifest.json").read_text())
    assert any(p["name"].startswith("lm.transformer.h.3.") for p in m["fragments"][1]["params"])


def test_equal_fragments_are_named_up_front(tmp_path):
    """Same-sized fragments: the warning comes before anything starts (here the run dir is then
    refused, so nothing trains; the warning did not wait for the run)."""
    (tmp_path / "runs" / "taken").mkdir(parents=True)
    r = subprocess.run(
        [
            *FTRUN,
            "train",
            "--model",
            "tests.user_model_fixtures:stack",
            "--model-arg",
            "depth=2",
            "--model-arg",
            "growing=false",
            "--fragment-fqns",
            "emb,layers.0;layers.1,out",
            *TRAIN,
            "--out",
            str(tmp_path / "runs"),
            "--run-name",
            "taken",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("warning: fragments 0 and 1 have identical parameter sizes"), r.stderr
    assert "already exists" in lines[-1]
