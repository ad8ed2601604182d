"""Build a user's model: ``--model MODULE:FACTORY`` (the contract is in ``ftrun.model_spec``) or
``hf:NAME``. Its fragments come from ``ftrun.worker.fragments``, as a built-in model's do; the
pre-launch check is ``python -m ftrun.worker.models``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftrun.model_spec import ModelArg, ModelSpec, parse_model
from ftrun.worker.fragments import ModelError


def _import(module: str, flag: str):
    try:
        if module.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(module).stem, module)
            if spec is None or spec.loader is None:  # not a file Python can load as a module
                raise ImportError(f"no module loader for {module}")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            spec.loader.exec_module(mod)
            return mod
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(module)
    except Exception as e:  # the user's import error, in one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        hint = ""
        if isinstance(e, ModuleNotFoundError) and not module.endswith(".py"):  # a file works by its path
            opt, _, given = flag.partition(" ")  # "--model pkg.mod:factory"
            factory = given.rpartition(":")[2] or "FACTORY"
            hint = f"; a file is named by its path: {opt} path/to/{module.rsplit('.', 1)[-1]}.py:{factory}"
        raise ModelError(f"{flag}: cannot import {module}: {type(e).__name__}: {msg}{hint}") from None


class _LogitsOf(nn.Module):
    """A Hugging Face causal LM, returning its ``.logits`` tensor."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=tokens).logits


def hf_requirement() -> str:
    """The ``hf`` extra's requirement as ftrun's installed metadata lists it (pyproject.toml)."""
    from importlib import metadata

    try:
        reqs = metadata.requires("ftrun") or []
    except metadata.PackageNotFoundError:
        reqs = []
    return next((r.split(";")[0].strip() for r in reqs if 'extra == "hf"' in r), "transformers")


def _hf(name: str, vocab: int, args: dict[str, ModelArg], flag: str) -> nn.Module:
    if importlib.util.find_spec("transformers") is None:  # ftrun is not on PyPI: name this Python's pip
        raise ModelError(
            f"{flag}: needs the transformers package; install it with: "
            f"{sys.executable} -m pip install '{hf_requirement()}'"
        )
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.for_model(name, vocab_size=vocab, **args)
        return _LogitsOf(AutoModelForCausalLM.from_config(config))
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise ModelError(f"{flag}: transformers cannot build {name!r}: {type(e).__name__}: {first}") from None


def build_user_model(spec: ModelSpec) -> nn.Module:
    """``FACTORY(vocab_size=..., seq_len=..., **model_args)``, seeded by ``spec.seed``."""
    flag = spec.flag
    module, factory = parse_model(spec.model)
    args = spec.model_args
    torch.manual_seed(spec.seed)
    if module == "hf":
        return _hf(factory, spec.vocab, args, flag)
    fn: Any = _import(module, flag)
    for part in factory.split("."):
        if not hasattr(fn, part):
            raise ModelError(f"{flag}: {module} has no attribute {factory!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ModelError(f"{flag}: {factory} is not callable")
    try:
        model = fn(vocab_size=spec.vocab, seq_len=spec.seq_len, **args)
    except Exception as e:
        raise ModelError(
            f"{flag}: {factory}(vocab_size={spec.vocab}, seq_len={spec.seq_len}"
            + "".join(f", {k}={v!r}" for k, v in args.items())
            + f") failed: {type(e).__name__}: {e}"
        ) from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"{flag}: {factory} returned {type(model).__name__}, not a torch.nn.Module")
    return model
