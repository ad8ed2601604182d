"""The outer step's stages, checked on the sketches (``ftrun.worker.sketch_outer``). Torch-free.

``ftrun.check.numerics`` checks the collective (SUM, average); this module checks what comes
before and after it, per committed sync and replica, each stage linear in the sketches:

* ``pseudo-gradient``: the contribution = ``original`` − ``local`` (the send's sketches; a
  participant only: a non-participant contributes zeros, checked there). A contribution equal to
  local − original: "sign flipped".
* ``original``: the send's ``original`` = the globals after this replica's last commit of the
  fragment (``OuterStep.params_after``; a failed commit in between changes neither). Not compared
  on the fragment's first round in the log (the initial parameters) and after a heal since that
  commit (the heal's fingerprints check the loaded globals). Equal to an older commit's globals:
  "stale original parameters".
* ``outer step``: torch's SGD with the recorded hyper-parameters (lr, momentum μ, dampening d,
  nesterov, weight decay λ, maximize), g = ±average + λ·original: the parameters after the step
  = original − lr·u with u = g + μ·B (nesterov) or B (momentum) or g, B the momentum buffers after
  the step; and B = g on the first step, else μ·B_prev + (1−d)·g with B_prev this replica's
  buffers after its last commit of the fragment (not compared after a heal: the buffers came with
  the checkpoint). A step that fits another lr: "wrong lr". Any other optimizer (Adam: not linear
  in its state) is not checked, and the output says so.
* ``merge`` (``fragment_update_alpha`` α > 0): merged = (1−α)·globals + α·local at the sync;
  equal to the globals: "α ignored". α = 0: the merge leaves the globals (nothing to check).

Tolerances (Z as in ``ftrun.check.numerics``): each elementwise op rounds once by at most u·|result|,
so a stage's budget is Z·u·(the norms of its terms, weighted by their coefficients) plus every
sketch's own error (``sketch_error``), u the dtype's unit roundoff (``OUTER_RULE``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ftrun.check.numerics_core import Z, add, diff, near, roundoff, scale, sketch_error
from ftrun.layout import OuterStep, RoundNumerics, Sketch

OUTER_RULE = (
    "outer step: pseudo-gradient Z*u*||c|| + sketch errors; original = last commit's globals: sketch errors "
    "(a copy); SGD step Z*u*(||p_before|| + ||p_after|| + 3*lr*(||avg|| + wd*||p_before|| + (1+mu)*||buf||)); "
    "momentum Z*u*(mu*||buf_prev|| + 2*||g|| + ||buf||); merge Z*u*(||merged|| + 2*||globals|| + 2*alpha*||local||); "
    "each + the sketches' own errors"
)
STAGES = ("pseudo-gradient", "original", "outer step", "momentum", "merge")
LINEAR_OPTIMIZERS = ("SGD",)


@dataclass
class Stage:
    """One stage's tally: rounds checked, the largest error against its tolerance, why not checked."""

    checked: int = 0
    largest: dict[str, Any] | None = None
    not_checked: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.not_checked[why] = self.not_checked.get(why, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {"checked": self.checked, "largest_error": self.largest, "not_checked": self.not_checked}


@dataclass
class Finding:
    """A stage that failed: the projection that is off most, and the likely cause."""

    stage: str
    expected: float
    observed: float
    error: float
    tolerance: float
    cause: str
    what: str


@dataclass
class Mine:
    """One replica's round as this check needs it."""

    replica: int
    rank: int
    sync_step: int
    send: RoundNumerics | None
    average: Sketch | None
    outer: OuterStep | None
    avg_bound: float  # bounds ||average|| (its norm is not recorded): sum||c|| / n
    restart: int = 0  # its process's incarnation: a relaunched one starts from new parameters


@dataclass
class History:
    """A replica's last commits of a fragment: (sync step, manager step after, its OuterStep)."""

    commits: list[tuple[int, int | None, OuterStep]] = field(default_factory=list)


class OuterChecker:
    """The stages of every committed sync, in sync-step order (``check``)."""

    def __init__(
        self, heal_steps: dict[tuple[int, int], list[int]], commit_steps: dict[tuple[int, int, int], list[int]]
    ) -> None:
        self.stages = {s: Stage() for s in STAGES}
        self.history: dict[tuple[int, int, int, int], History] = {}
        self.heal_steps = heal_steps  # (replica, rank) -> steps whose record shows a heal
        self.commit_steps = commit_steps  # (replica, rank, fragment) -> steps of its commits, in the log

    def measure(self, stage: str, err: float, tol: float, where: str) -> bool:
        st = self.stages[stage]
        ratio = err / tol if tol > 0 else (0.0 if err == 0 else math.inf)
        if math.isfinite(ratio) and (st.largest is None or ratio > st.largest["ratio"]):
            st.largest = {"where": where, "error": err, "tolerance": tol, "ratio": ratio}
        ok = err <= tol and math.isfinite(tol)
        st.checked += ok
        return ok

    def healed_since(self, m: Mine, since: int) -> bool:
        return any(since < h <= m.sync_step for h in self.heal_steps.get((m.replica, m.rank), []))

    def check(self, m: Mine, fragment: int, manager_step_after: int | None) -> list[Finding]:
        """Every stage of replica ``m``'s committed round of ``fragment``; remembers its globals."""
        where = f"replica {m.replica} rank {m.rank} sync step {m.sync_step}"
        out: list[Finding] = []
        # per incarnation: a relaunched process's first round starts from the initial or loaded globals
        hist = self.history.setdefault((m.replica, m.rank, fragment, m.restart), History())
        last = hist.commits[-1] if hist.commits else None
        before = [x for x in self.commit_steps.get((m.replica, m.rank, fragment), []) if x < m.sync_step]
        if last is not None and before and before[-1] != last[0]:
            last = None  # its last commit was not seen here (not sketched): nothing to compare with
        send = m.send
        o, loc = (send.original, send.local) if send is not None else (None, None)
        if send is None or o is None or loc is None or send.contribution is None:
            for s in ("pseudo-gradient", "original"):
                self.stages[s].skip("original/local not sketched (an ftrun before them, or the sketch failed)")
        else:
            out += self._pseudo(send, o, loc, send.contribution, where)
            out += self._original(m, o, hist, last, where)
        if m.outer is not None:
            out += self._step(m, o, last, where)
            out += self._merge(m.outer, where)
        else:
            self.stages["outer step"].skip("outer step not sketched")
        if m.outer is not None and m.outer.params_after is not None:
            hist.commits.append((m.sync_step, manager_step_after, m.outer))
            del hist.commits[:-4]  # enough to name a stale original a few rounds back
        return out

    def _pseudo(self, send: RoundNumerics, o: Sketch, loc: Sketch, c: Sketch, where: str) -> list[Finding]:
        st = "pseudo-gradient"
        if not send.participating:
            self.stages[st].skip("not participating (contributes zeros: checked with the SUM)")
            return []
        want = add(o.proj, loc.proj, -1.0)
        tol = Z * roundoff(c.dtype) * (c.norm or 0.0) + sketch_error(c) + sketch_error(o) + sketch_error(loc)
        err, j = diff(c.proj, want)
        if self.measure(st, err, tol, where):
            return []
        if near(c.proj, scale(want, -1.0), tol):
            cause = "sign flipped: the contribution is local - original (the pseudo-gradient negated)"
        else:
            cause = "the contribution is not the pseudo-gradient (values changed before the collective)"
        what = "the contribution is not original - local parameters"
        return [Finding(st, want[j], c.proj[j], err, tol, cause, what)]

    def _original(
        self, m: Mine, o: Sketch, hist: History, last: tuple[int, int | None, OuterStep] | None, where: str
    ) -> list[Finding]:
        st = "original"
        if last is None:
            self.stages[st].skip("first round of the fragment in the log (the initial or loaded parameters)")
            return []
        if self.healed_since(m, last[0]):
            self.stages[st].skip("healed since its last commit (the heal's fingerprints check the loaded globals)")
            return []
        g = last[2].params_after
        assert g is not None  # (only commits with it are remembered)
        tol = sketch_error(o) + sketch_error(g)
        err, j = diff(o.proj, g.proj)
        if self.measure(st, err, tol, where):
            return []
        cause = "the original parameters changed between the commit and the send"
        for step, ms, older in reversed(hist.commits[:-1]):
            og = older.params_after
            if og is not None and near(o.proj, og.proj, sketch_error(o) + sketch_error(og)):
                cause = (
                    f"stale original parameters: equal to the globals of the commit at sync step {step} "
                    f"(manager step {ms}), not the last one's (save_parameters did not store them)"
                )
                break
        what = f"the send's original parameters are not the globals of the last commit (sync step {last[0]})"
        return [Finding(st, g.proj[j], o.proj[j], err, tol, cause, what)]

    def _step(
        self, m: Mine, o: Sketch | None, last: tuple[int, int | None, OuterStep] | None, where: str
    ) -> list[Finding]:
        s = m.outer
        assert s is not None
        if s.optimizer not in LINEAR_OPTIMIZERS:
            why = f"outer step of {s.optimizer}: not checked (not linear in its state; checked up to the average)"
            self.stages["outer step"].skip(why)
            return []
        a, p, b = m.average, s.params_after, s.momentum_after
        if o is None or a is None or p is None or (s.momentum and b is None):
            self.stages["outer step"].skip("a sketch of the step missing (average, original or after the step)")
            return []
        u_d = roundoff(p.dtype)
        sign = -1.0 if s.maximize else 1.0
        g = add(scale(a.proj, sign), o.proj, s.weight_decay)
        g_norm = m.avg_bound + s.weight_decay * (o.norm or 0.0)
        g_err = sketch_error(a, m.avg_bound) + s.weight_decay * sketch_error(o)
        out: list[Finding] = []
        if s.momentum and b is not None:
            u = add(g, b.proj, s.momentum) if s.nesterov else b.proj
            u_norm = (g_norm if s.nesterov else 0.0) + (1 + s.momentum) * (b.norm or 0.0)
            u_err = (g_err if s.nesterov else 0.0) + (1 + s.momentum) * sketch_error(b)
            out += self._momentum(m, s, g, g_norm, g_err, b, last, where)
        else:
            u, u_norm, u_err = g, g_norm, g_err
        want = add(o.proj, u, -s.lr)
        tol = Z * u_d * ((o.norm or 0.0) + (p.norm or 0.0) + 3 * s.lr * u_norm)
        tol += sketch_error(o) + sketch_error(p) + s.lr * u_err
        err, j = diff(p.proj, want)
        if self.measure("outer step", err, tol, where):
            return out
        step = add(o.proj, p.proj, -1.0)  # = lr_effective * u
        uu = sum(x * x for x in u)
        fit = sum(x * y for x, y in zip(step, u, strict=True)) / uu if uu > 0 else 0.0
        if uu > 0 and near(add(o.proj, u, -fit), p.proj, tol):
            cause = f"wrong lr: the step fits lr {fit:.6g}, the optimizer's param_groups say {s.lr:g}"
        else:
            cause = (
                f"not {s.optimizer}'s update with the recorded hyper-parameters (lr {s.lr:g}, momentum "
                f"{s.momentum:g}, nesterov {s.nesterov}, weight decay {s.weight_decay:g}): wrong momentum?"
            )
        what = "the parameters after the outer step are not original - lr * update"
        return [*out, Finding("outer step", want[j], p.proj[j], err, tol, cause, what)]

    def _momentum(
        self,
        m: Mine,
        s: OuterStep,
        g: list[float],
        g_norm: float,
        g_err: float,
        b: Sketch,
        last: tuple[int, int | None, OuterStep] | None,
        where: str,
    ) -> list[Finding]:
        st = "momentum"
        if s.first_momentum:
            want, prev_norm, prev_err = g, 0.0, 0.0
        elif last is None or last[2].momentum_after is None:
            self.stages[st].skip("no previous buffer in the log (the first commit seen, or loaded with a heal)")
            return []
        elif self.healed_since(m, last[0]):
            self.stages[st].skip("healed since its last commit (the buffers came with the checkpoint)")
            return []
        else:
            prev = last[2].momentum_after
            want = add(scale(prev.proj, s.momentum), g, 1.0 - s.dampening)
            prev_norm, prev_err = s.momentum * (prev.norm or 0.0), s.momentum * sketch_error(prev)
        tol = Z * roundoff(b.dtype) * (prev_norm + 2 * g_norm + (b.norm or 0.0)) + prev_err + g_err + sketch_error(b)
        err, j = diff(b.proj, want)
        if self.measure(st, err, tol, where):
            return []
        cause = f"wrong momentum or dampening (recorded momentum {s.momentum:g}, dampening {s.dampening:g})"
        what = "the momentum buffers after the step are not momentum * previous + (1 - dampening) * gradient"
        return [Finding(st, want[j], b.proj[j], err, tol, cause, what)]

    def _merge(self, s: OuterStep, where: str) -> list[Finding]:
        st = "merge"
        if s.alpha is None:
            self.stages[st].skip("this torchft has no fragment_update_alpha (no merge)")
            return []
        if not s.alpha:
            self.stages[st].skip("alpha = 0 (the merge leaves the globals)")
            return []
        g, loc, mg = s.params_after, s.local_sync, s.merged
        if g is None or loc is None or mg is None:
            self.stages[st].skip("a sketch of the merge missing")
            return []
        want = add(scale(g.proj, 1.0 - s.alpha), loc.proj, s.alpha)
        tol = Z * roundoff(mg.dtype) * ((mg.norm or 0.0) + 2 * (g.norm or 0.0) + 2 * s.alpha * (loc.norm or 0.0))
        tol += sketch_error(mg) + sketch_error(g) + s.alpha * sketch_error(loc)
        err, j = diff(mg.proj, want)
        if self.measure(st, err, tol, where):
            return []
        if near(mg.proj, g.proj, tol):
            cause = f"alpha ignored: the merged parameters are the globals (fragment_update_alpha {s.alpha:g} unused)"
        else:
            cause = "the merge is not lerp(globals, local, alpha)"
        what = f"the merged parameters are not (1 - {s.alpha:g}) * globals + {s.alpha:g} * local"
        return [Finding(st, want[j], mg.proj[j], err, tol, cause, what)]

    def to_json(self) -> dict[str, Any]:
        return {s: st.to_json() for s, st in self.stages.items()}


def stages_text(stages: dict[str, Any] | None) -> str:
    """The outer stages in one clause for the numerics line: checked counts, worst ratio, skips."""
    if not stages:
        return ""
    parts = []
    for name, st in stages.items():
        le = st.get("largest_error")
        worst = f" (worst {le['ratio']:.2g} of tol)" if le else ""
        skipped = sum((st.get("not_checked") or {}).values())
        if st.get("checked") or skipped:
            parts.append(f"{name} {st.get('checked', 0)} ok{worst}" + (f" + {skipped} not checked" if skipped else ""))
    return f"; outer stages: {', '.join(parts)}" if parts else ""
