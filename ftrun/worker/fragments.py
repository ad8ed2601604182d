"""A model's fragments, for built-in and user models alike: which parameters each holds, the
``Fragment`` module torchft's streaming DiLoCo syncs, and its manifest record.

The split (torchtitan's ``module_fqns_per_model_fragment`` convention, ``ftrun.model_spec``):
the model's blocks (an ``nn.ModuleList``) in F contiguous groups (``model_desc.even_split``),
parameters before the blocks in the first fragment and those after them in the last; or, for a
user's model, ``--fragment-fqns`` groups of names. A fragment's parameters are named by the
model's own names (``fqns``) and keep the model's order, which is the order torchft allreduces them in.
"""

from __future__ import annotations

from torch import nn

from ftrun import layout
from ftrun.model_desc import even_split


class ModelError(Exception):
    """A problem with the user's model, as one line naming --model / --fragment-fqns."""


class Fragment(nn.Module):
    """Some of the model's parameters (shared, not copied); ``fqns`` are their names in the model."""

    def __init__(self, named: list[tuple[str, nn.Parameter]]) -> None:
        super().__init__()
        self.fqns = [n for n, _ in named]
        for n, p in named:
            self.register_parameter(n.replace(".", "/"), p)  # a parameter's own name may not hold a dot

    def record(self, i: int) -> layout.Fragment:
        """Manifest form (``layout.Fragment``): each parameter's name, numel and shape in allreduce
        order; bytes as its tensors hold them (each parameter's own dtype)."""
        ps = list(self.parameters())
        params = [layout.Param(fq, p.numel(), list(p.shape)) for fq, p in zip(self.fqns, ps, strict=True)]
        return layout.Fragment(
            id=i,
            params=params,
            numel=sum(p.numel() for p in ps),
            bytes=sum(p.numel() * p.element_size() for p in ps),
        )


def describe_fragments(fragments: list[Fragment]) -> list[layout.Fragment]:
    return [f.record(i) for i, f in enumerate(fragments)]


def largest_list(model: nn.Module) -> tuple[str, nn.ModuleList] | None:
    """The model's largest non-empty ``nn.ModuleList`` (its blocks, by the convention) and its name."""
    best = None
    for name, m in model.named_modules():
        if isinstance(m, nn.ModuleList) and len(m) and (best is None or len(m) > len(best[1])):
            best = (name, m)
    return best


def by_blocks(names: list[str], prefix: str, blocks: int, fragments: int) -> list[list[str]]:
    """Parameter names per fragment: the ``blocks`` blocks under ``prefix`` evenly, what comes
    before them with the first fragment, what comes after with the last."""
    if fragments > blocks:
        raise ModelError(
            f"--fragments {fragments}: exceeds the {blocks} blocks of {prefix or 'the model'} "
            "(each fragment is a group of whole blocks)"
        )
    frag_of_block = [f for f, size in enumerate(even_split(blocks, fragments)) for _ in range(size)]
    out: list[list[str]] = [[] for _ in range(fragments)]
    seen_block = False
    lead = f"{prefix}." if prefix else ""
    for name in names:
        rest = name[len(lead) :] if name.startswith(lead) else None
        idx = rest.split(".")[0] if rest is not None else None
        if idx is not None and idx.isdigit() and int(idx) < blocks:
            out[frag_of_block[int(idx)]].append(name)
            seen_block = True
        else:
            out[fragments - 1 if seen_block else 0].append(name)
    return out


def by_fqns(names: list[str], fqns: list[list[str]]) -> list[list[str]]:
    """Parameter names per fragment from ``--fragment-fqns`` groups (module or parameter names,
    prefixes by whole components); every parameter in exactly one group, every name used."""
    out: list[list[str]] = [[] for _ in fqns]
    for n in names:
        hits = [i for i, g in enumerate(fqns) if any(n == p or n.startswith(p + ".") for p in g)]
        if not hits:
            raise ModelError(f"--fragment-fqns: parameter {n} belongs to no fragment")
        if len(hits) > 1:
            raise ModelError(f"--fragment-fqns: parameter {n} belongs to fragments {hits[0]} and {hits[1]}")
        out[hits[0]].append(n)
    for i, g in enumerate(fqns):
        for p in g:
            if not any(n == p or n.startswith(p + ".") for n in names):
                raise ModelError(f"--fragment-fqns: {p!r} (fragment {i}) names no parameter of the model")
    return out


def assign_fragments(
    model: nn.Module,
    fragments: int,
    fqns: list[list[str]] | None = None,
    blocks: tuple[str, nn.ModuleList] | None = None,
) -> list[list[str]]:
    """Parameter names per fragment (module docstring); ``blocks``: the model's blocks and their
    name when the builder knows them, else its largest ``nn.ModuleList``. ``ModelError``."""
    names = [n for n, _ in model.named_parameters()]
    if fqns is not None:
        return by_fqns(names, fqns)
    found = blocks or largest_list(model)
    if found is None:
        raise ModelError("--model: the model has no nn.ModuleList of blocks to split; give --fragment-fqns")
    return by_blocks(names, found[0], len(found[1]), fragments)


def split(model: nn.Module, groups: list[list[str]]) -> list[Fragment]:
    params = dict(model.named_parameters())
    return [Fragment([(n, params[n]) for n in group]) for group in groups]


def same_signatures(described: list[layout.Fragment]) -> list[str]:
    """Warnings for fragments whose parameter sizes are identical (traces cannot tell them apart)."""
    sigs: dict[tuple[int, ...], int] = {}
    out = []
    for f in described:
        sig = tuple(sorted(p.numel for p in f.params))  # as inspect-trace matches them
        if sig in sigs:
            out.append(
                f"fragments {sigs[sig]} and {f.id} have identical parameter sizes: inspect-trace cannot tell "
                "them apart from the traces, so their identity will not be checked"
            )
        else:
            sigs[sig] = f.id
    return out
