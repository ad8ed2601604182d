"""``ftrun train --model MODULE:FACTORY``: the user's model, as flags give it. Torch-free.

Contract of a factory (documented in docs/train.md, "Your own model"):

    FACTORY(vocab_size=V, seq_len=T, **model_args) -> torch.nn.Module

The module maps token ids ``[B, T]`` (int64) to logits ``[B, T, V]``, the LM convention:
ftrun feeds it ``--data`` as it feeds the built-in models and trains it with next-token
cross-entropy. ``--model-arg KEY=VALUE`` pairs reach the factory as keyword arguments (VALUE as
int, float, true/false, else the string). MODULE is a dotted module name importable from the
working directory or ``PYTHONPATH``, or a path to a ``.py`` file.

Fragments (``ftrun.worker.fragments``, as for a built-in model): the model's largest
``nn.ModuleList`` split into F contiguous groups (``ftrun.model_desc.even_split``), parameters
before it in the first fragment and those after it in the last (torchtitan's
``module_fqns_per_model_fragment`` convention); or ``--fragment-fqns "emb,stack.0;stack.1,out"``:
fragments separated by ';', each a comma list of module or parameter names (prefixes by whole
name components). Every parameter must fall in exactly one.

What building any model needs is one ``ModelSpec`` (``RunConfig.model_spec()`` derives it from
the config tree): the worker builds from it, and ``check(spec)`` sends it as JSON to a child
process that builds the model once (the parent never imports torch) and answers a ``ModelCheck``
(its warnings); any problem is ``BadInput`` with the child's one line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import msgspec

from ftrun.errors import BadInput
from ftrun.model_desc import BUILTIN_MODELS, Architecture

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_MODULE_RE = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")
_FACTORY_RE = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")

ModelArg = bool | int | float | str  # a ``--model-arg`` VALUE as the factory receives it


def is_user_model(model: str) -> bool:
    return model not in BUILTIN_MODELS


def parse_model(text: str) -> tuple[str, str]:
    """``MODULE:FACTORY`` -> (module, factory); ``BadInput`` when malformed (no import here)."""
    module, sep, factory = text.rpartition(":")
    if not sep or not module or not factory:
        shown = text if text.isprintable() and " " not in text else repr(text)
        raise BadInput(
            f"--model {shown}: expected {', '.join(BUILTIN_MODELS)}, MODULE:FACTORY (e.g. mymodels:tiny_gpt) or hf:NAME"
        )
    if module.endswith(".py"):
        if not Path(module).is_file():
            raise BadInput(f"--model {text}: {module}: no such file")
    elif not _MODULE_RE.match(module):
        raise BadInput(f"--model {text}: {module!r} is not a module name (dotted identifiers) or a .py file")
    if not _FACTORY_RE.match(factory):
        raise BadInput(f"--model {text}: {factory!r} is not a function name")
    return module, factory


def _value(v: str) -> ModelArg:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def parse_model_args(pairs: list[str]) -> dict[str, ModelArg]:
    """``KEY=VALUE`` pairs -> keyword arguments (module docstring)."""
    out: dict[str, ModelArg] = {}
    for p in pairs:
        key, eq, value = p.partition("=")
        if not eq or not re.match(rf"^{_IDENT}$", key):
            raise BadInput(f"--model-arg {p!r}: expected KEY=VALUE with KEY a Python name, e.g. n_layer=4")
        if key in ("vocab_size", "seq_len"):
            raise BadInput(f"--model-arg {p}: {key} is given by ftrun (--vocab / --seq-len)")
        if key in out:
            raise BadInput(f"--model-arg {key}: given twice")
        out[key] = _value(value)
    return out


def parse_fragment_fqns(text: str, fragments: int) -> list[list[str]] | None:
    """``"a,b;c"`` -> [["a", "b"], ["c"]]; must name exactly ``fragments`` groups."""
    if not text:
        return None
    groups = [[n.strip() for n in g.split(",") if n.strip()] for g in text.split(";")]
    if any(not g for g in groups):
        raise BadInput(f"--fragment-fqns {text!r}: an empty fragment (fragments are ';'-separated lists of names)")
    if len(groups) != fragments:
        raise BadInput(f"--fragment-fqns {text!r}: names {len(groups)} fragment(s) but --fragments is {fragments}")
    return groups


# Bytes of a model check's settings at most (one ``ModelSpec`` as JSON, a command-line argument of
# the child: the kernel takes 128 KiB per argument); a spec is a few hundred bytes
MODEL_SPEC_LIMIT = 64 << 10


class ModelSpec(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """What building the run's model and its fragments needs, by the config's names
    (``RunConfig.model_spec()`` derives it; the worker and the model check build from it).
    ``model_args``: the ``--model-arg`` pairs parsed (``parse_model_args``), as the factory
    receives them; ``fragment_fqns``: the flag's text (``parse_fragment_fqns``); ``width`` and
    ``blocks`` shape a built-in model only."""

    model: str
    model_args: dict[str, ModelArg] = {}
    vocab: int
    seq_len: int
    width: int
    blocks: int
    fragments: int
    fragment_fqns: str = ""
    seed: int

    @property
    def architecture(self) -> Architecture | None:
        """The built-in model's shape; None for a user's model (its shape is known once built)."""
        if is_user_model(self.model):
            return None
        return Architecture(self.model, self.vocab, self.width, self.blocks, self.seq_len)

    @property
    def flag(self) -> str:
        """``--model NAME``, as error lines name the model."""
        return f"--model {self.model}"


def decode_spec(data: str | bytes) -> ModelSpec:
    """A ``ModelSpec`` from its JSON (``MODEL_SPEC_LIMIT`` bytes at most); ``BadInput``, one line, otherwise."""
    if len(data) > MODEL_SPEC_LIMIT:
        raise BadInput(f"model spec: {len(data)} bytes of JSON, more than {MODEL_SPEC_LIMIT} (a spec is a few hundred)")
    try:
        return msgspec.json.decode(data, type=ModelSpec)
    except msgspec.DecodeError as e:  # ValidationError included: a field of the wrong type, named by its path
        raise BadInput(f"model spec: {e}") from None


class ModelCheck(msgspec.Struct, omit_defaults=True):
    """The model check's answer (``ftrun.worker.models.check``, JSON on the child's stdout), as the
    parent reads it: its warnings, or its one-line error. (The child's answer, a subclass, also
    carries the ``layout.Fragment`` records it built: the child's to show; the ranks write them
    in their meta.)"""

    warnings: list[str] = []
    error: str | None = None


def check(spec: ModelSpec) -> ModelCheck:
    """Build the user's model of ``spec`` in a child (``python -m ftrun.worker.models``): returns its
    warnings, or raises ``BadInput`` with its one-line error."""
    payload = msgspec.json.encode(spec).decode()
    if len(payload) > MODEL_SPEC_LIMIT:
        raise BadInput(
            f"{spec.flag}: its settings (--model-arg, --fragment-fqns) are {len(payload)} bytes of JSON, "
            f"more than the {MODEL_SPEC_LIMIT} a model check takes"
        )
    try:
        res = subprocess.run(
            [sys.executable, "-m", "ftrun.worker.models", payload], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        raise BadInput(f"{spec.flag}: building the model took more than 300 s") from None
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        err = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise BadInput(f"{spec.flag}: {err[:400]}")
    try:
        out = msgspec.json.decode(lines[-1], type=ModelCheck)
    except msgspec.DecodeError as e:
        raise BadInput(f"{spec.flag}: the model check answered {lines[-1][:200]!r} ({e})") from None
    if out.error:
        raise BadInput(out.error)
    return out
