"""Where torchft's quantized allreduce lives (``ftrun.torchft_compat.quantized_site``): in the installed
release (CI runs the unit suite on torchft 0.2.x and on torchft-nightly), and what ftrun says when a
release calls or defines it otherwise. Reads source text: no triton, no GPU, no process."""

from __future__ import annotations

from ftrun import torchft_compat as compat
from ftrun.torchft_compat.sources import torchft_source


def _sources() -> tuple[str, str]:
    man = torchft_source(compat.QUANTIZED_MODULE)
    col = torchft_source(compat.QUANTIZED_SOURCE)
    assert man is not None and col is not None, "torchft/manager.py and torchft/collectives.py are installed"
    return man, col


def test_the_installed_release_calls_the_name_the_adapter_wraps() -> None:
    site = compat.quantized_site()
    assert site.why is None, (compat.installed().describe(), site)
    assert site.called and site.imported_from == "torchft.collectives"
    assert site.params == ("tensors", "opts", "process_group", "sync_stream")


def test_a_release_that_calls_or_defines_it_otherwise_is_named() -> None:
    man, col = _sources()
    renamed = man.replace("work = allreduce_quantized(", "work = quantized_allreduce(")
    assert "makes no call allreduce_quantized" in compat.quantized_site_of_source(renamed, col).why
    moved = man.replace(
        "from torchft.collectives import allreduce_quantized", "from torchft.q import allreduce_quantized"
    )
    assert (
        "does not import allreduce_quantized from torchft.collectives"
        in compat.quantized_site_of_source(moved, col).why
    )
    other = col.replace("def allreduce_quantized(\n    tensors:", "def allreduce_quantized(\n    inputs:")
    assert other != col
    why = compat.quantized_site_of_source(man, other).why
    assert why == (
        "torchft.collectives.allreduce_quantized takes (inputs, opts, process_group, sync_stream), "
        "not (tensors, opts, process_group, sync_stream)"
    )
    assert "defines no allreduce_quantized" in compat.quantized_site_of_source(man, "x = 1\n").why
    assert compat.quantized_site_of_source(None, col).why == "torchft/manager.py not found"
    assert compat.quantized_site_of_source("def (", col).why  # not Python: named, never a crash
