"""The outer step's stages, checked on the sketches (``ftrun.worker.sketch_outer``). Torch-free.

``ftrun.check.numerics`` checks the collective (SUM, average); this module checks what comes
before and after it, per committed sync and replica, each stage linear in the sketches:

* ``pseudo-gradient``: the contribution = ``original`` − ``local`` (the send's sketches; a
  participant only: a non-participant contributes zeros, checked there). A contribution equal to
  local − original: "sign flipped".
* ``outer step``: torch's SGD with the recorded hyper-parameters (lr, momentum μ, dampening d,
  nesterov, weight decay λ, maximize): g = ±average + λ·original, the update u = g + μ·B
  (nesterov), B (momentum) or g, B the momentum buffers after the step, and the globals after the
  step = original − lr·u. The globals are read where torchft keeps them: the next round's
  ``original`` of the same replica and fragment (``save_parameters`` copies them there; a failed
  commit in between changes neither). So this stage also proves that the next round starts from
  the committed globals; next originals equal to this round's: "stale original parameters"; a
  step that fits another lr: "wrong lr". B is derived: g on the buffers' first step, else
  μ·B_prev + (1−d)·g with B_prev this replica's buffers after its last commit of the fragment;
  where that chain is unknown (after a heal, or the first step a process took with loaded
  buffers) the worker sketched B (``momentum``: compared with the chain where both exist). Not
  compared: the fragment's last sync in the log (no next send), a step followed by a heal (the next
  originals came with the checkpoint: the heal's fingerprints check them), any other optimizer
  (Adam: not linear in its state; the output says so).
* ``merge`` (``fragment_update_alpha`` α > 0): merged = (1−α)·globals + α·local at the sync, the
  globals again the next round's originals; equal to the globals: "α ignored". α = 0: the merge
  leaves the globals (nothing to check).

Where a send carries no ``original`` (the worker sketches it only where the check cannot derive
it: ``ftrun.worker.sketch_outer``), the previous commit's globals are derived (original − lr·u)
and one comparison, contribution = globals − local, proves both the pseudo-gradient and that
step (``OuterChecker._through``); a failure is named by the same causes (sign flipped, stale
original parameters, wrong lr). The next step then starts from contribution + local, the
originals as torchft computed the pseudo-gradient from them, so the budget does not grow along
the chain; only the bound on their norm does (by lr·||u|| + 2·||c|| a round, until the worker
sketches them again). A send without originals after a commit the check cannot derive is
counted "not checked", never ok.

Tolerances (Z as in ``ftrun.check.numerics``): each elementwise op rounds once by at most u·|result|,
so a stage's budget is Z·u·(the norms of its terms, weighted by their coefficients) plus every
sketch's own error (``sketch_error``), u the dtype's unit roundoff; a derived buffer carries the
budget of the chain it came from (``OUTER_RULE``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ftrun.check.numerics_core import Z, add, diff, near, roundoff, scale, sketch_error
from ftrun.layout import LINEAR_OPTIMIZERS, OuterStep, RoundNumerics, Sketch, StageError, StageTally

OUTER_RULE = (
    "outer step: pseudo-gradient Z*u*||c|| + sketch errors; SGD step against the next round's originals "
    "Z*u*(||p|| + ||p_next|| + 2*lr*||update||) + lr*(the update's budget: the average's, wd*||p||'s and the "
    "momentum buffers', derived ones carrying their chain's Z*u*(mu*||buf_prev|| + ||g|| + ||buf||) per round); "
    "merge Z*u*(||merged|| + 2*||globals|| + 2*alpha*||local||); each + the sketches' own errors"
)
STAGES = ("pseudo-gradient", "outer step", "momentum", "merge")


def skip(stage: StageTally, why: str, n: int = 1) -> None:
    """One more round of ``stage`` not checked, for ``why``."""
    stage.not_checked[why] = stage.not_checked.get(why, 0) + n


@dataclass
class Finding:
    """A stage that failed: the projection that is off most, the likely cause, and the round it is
    about (``ref``: that round's ``Mine.ref``; None: the round being checked)."""

    stage: str
    expected: float
    observed: float
    error: float
    tolerance: float
    cause: str
    what: str
    ref: Any = None


@dataclass
class Mine:
    """One replica's committed round as this check needs it; ``ref`` is handed back in a Finding."""

    replica: int
    rank: int
    sync_step: int
    send: RoundNumerics | None
    average: Sketch | None
    outer: OuterStep | None
    avg_bound: float  # bounds ||average|| (its norm is not recorded): sum||c|| / n
    restart: int = 0  # its process's incarnation: a relaunched one starts from new parameters
    ref: Any = None


@dataclass
class Vec:
    """A sketch observed or derived: projections, a bound on its norm, the budget of its error."""

    proj: list[float]
    norm: float
    err: float


@dataclass
class Done:
    """A committed step, waiting for the next round's originals (its globals)."""

    sync_step: int
    ref: Any
    step: OuterStep
    original: Vec  # its originals: sketched, or derived (``OuterChecker._through``)
    dtype: str  # the fragment's parameters'
    update: Vec | None  # u (None: not known: another optimizer, or buffers of unknown origin)
    buffers: Vec | None  # B after the step
    checked: bool = False


class OuterChecker:
    """The stages of every committed sync, in sync-step order (``check``); ``finish`` counts the
    steps no next send showed."""

    def __init__(
        self, heal_steps: dict[tuple[int, int], list[int]], commit_steps: dict[tuple[int, int, int], list[int]]
    ) -> None:
        self.stages = {s: StageTally() for s in STAGES}
        # per incarnation: a relaunched process's first round starts from the initial or loaded globals
        self.last: dict[tuple[int, int, int, int], Done] = {}
        self.heal_steps = heal_steps  # (replica, rank) -> steps whose record shows a heal
        self.commit_steps = commit_steps  # (replica, rank, fragment) -> steps of its commits, in the log

    def measure(self, stage: str, err: float, tol: float, where: str) -> bool:
        st = self.stages[stage]
        ratio = err / tol if tol > 0 else (0.0 if err == 0 else math.inf)
        if math.isfinite(ratio) and (st.largest_error is None or ratio > st.largest_error.ratio):
            st.largest_error = StageError(where, err, tol, ratio)
        ok = err <= tol and math.isfinite(tol)
        st.checked += ok
        return ok

    def healed_since(self, m: Mine, since: int) -> bool:
        return any(since < h <= m.sync_step for h in self.heal_steps.get((m.replica, m.rank), []))

    def _last(self, m: Mine, fragment: int) -> tuple[Done | None, bool]:
        """This replica's last commit of ``fragment`` when it is the one the log shows last before
        ``m`` (else None: a commit not sketched lies between), and whether a heal followed it."""
        last = self.last.get((m.replica, m.rank, fragment, m.restart))
        before = [x for x in self.commit_steps.get((m.replica, m.rank, fragment), []) if x < m.sync_step]
        if last is None or (before and before[-1] != last.sync_step):
            return None, False
        return last, self.healed_since(m, last.sync_step)

    def check(self, m: Mine, fragment: int) -> list[Finding]:
        """Every stage of replica ``m``'s committed round of ``fragment``: its pseudo-gradient, the
        previous commit's step and merge against this send's originals (sketched, or where not,
        ``contribution + local`` against the globals derived from that step: ``_through``); then
        remembers this step."""
        where = f"replica {m.replica} rank {m.rank} sync step {m.sync_step}"
        out: list[Finding] = []
        last, healed = self._last(m, fragment)
        due = last is not None and not last.checked  # its step and merge compare with this send
        if last is not None and due:
            last.checked = True
            if healed:
                why = "a heal before the next send (its originals came with the checkpoint: the heal's fingerprints)"
                self._skip_step(last, why)
                due = False
        send = m.send
        loc, c = (send.local, send.contribution) if send is not None else (None, None)
        o = observed(send.original) if send is not None and send.original is not None else None
        g = self._globals(last) if last is not None and not healed else None
        if send is None or loc is None or c is None:
            skip(self.stages["pseudo-gradient"], "original/local not sketched (an older ftrun, or a failed sketch)")
        elif o is not None:
            out += self._pseudo(send, o, loc, c, where)
        elif g is not None and last is not None and send.participating:
            found, o = self._through(last, g, loc, c, m, due)
            out += found
            due = False
        else:
            why = "originals not sketched and the last commit's globals not derivable"
            skip(self.stages["pseudo-gradient"], why)
        if due and last is not None:
            lw = f"replica {m.replica} rank {m.rank} sync step {last.sync_step}"
            if o is None:
                self._skip_step(last, "the next send's originals not sketched")
            else:
                out += self._step(last, o, m.sync_step, lw)
                out += self._merge(last, o, lw)
        if m.outer is not None and o is not None and send is not None:
            dtype = next(x.dtype for x in (send.original, loc, c) if x is not None)
            done = self._done(m, o, dtype, None if healed else last, where, out)
            self.last[(m.replica, m.rank, fragment, m.restart)] = done
        return out

    def _skip_step(self, d: Done, why: str) -> None:
        skip(self.stages["outer step"], why)
        if d.step.alpha:
            skip(self.stages["merge"], why)

    def finish(self) -> None:
        """Steps no next send of the same replica showed (the fragment's last sync in the log)."""
        for d in self.last.values():
            if not d.checked:
                self._skip_step(d, "the fragment's last sync in the log (no next send shows its globals)")
                d.checked = True

    def _pseudo(self, send: RoundNumerics, o: Vec, loc: Sketch, c: Sketch, where: str) -> list[Finding]:
        st = "pseudo-gradient"
        if not send.participating:
            skip(self.stages[st], "not participating (contributes zeros: checked with the SUM)")
            return []
        want = add(o.proj, loc.proj, -1.0)
        loc_norm = local_norm(loc, o.norm, c)
        tol = Z * roundoff(c.dtype) * (c.norm or 0.0) + sketch_error(c) + o.err + sketch_error(loc, loc_norm)
        err, j = diff(c.proj, want)
        if self.measure(st, err, tol, where):
            return []
        if near(c.proj, scale(want, -1.0), tol):
            cause = "sign flipped: the contribution is local - original (the pseudo-gradient negated)"
        else:
            cause = "the contribution is not the pseudo-gradient (values changed before the collective)"
        what = "the contribution is not original - local parameters"
        return [Finding(st, want[j], c.proj[j], err, tol, cause, what)]

    def _done(self, m: Mine, o: Vec, dtype: str, prev: Done | None, where: str, out: list[Finding]) -> Done:
        """This commit's update u and buffers B, observed or derived (module docstring)."""
        s = m.outer
        assert s is not None
        done = Done(m.sync_step, m.ref, s, o, dtype, None, None)
        if s.alpha is None:
            skip(self.stages["merge"], "this torchft has no fragment_update_alpha (no merge)")
        elif not s.alpha:
            skip(self.stages["merge"], "alpha = 0 (the merge leaves the globals)")
        if s.optimizer not in LINEAR_OPTIMIZERS:
            why = f"outer step of {s.optimizer}: not checked (not linear in its state; checked up to the average)"
            skip(self.stages["outer step"], why)
            done.checked = not s.alpha  # (its merge is still checked at the next send)
            return done
        a = m.average
        if a is None:
            return done  # (counted at the next send: no update to compare)
        u_d = roundoff(dtype)
        g_proj = add(scale(a.proj, -1.0 if s.maximize else 1.0), o.proj, s.weight_decay)
        g_norm = m.avg_bound + s.weight_decay * o.norm
        g = Vec(g_proj, g_norm, sketch_error(a, m.avg_bound) + s.weight_decay * o.err + Z * u_d * g_norm)
        if not s.momentum:
            done.update = g
            return done
        b = self._buffers(m, s, g, prev, u_d, where, out)
        done.buffers = b
        if b is not None:
            if s.nesterov:
                n = g.norm + s.momentum * b.norm
                done.update = Vec(add(g.proj, b.proj, s.momentum), n, g.err + s.momentum * b.err + Z * u_d * n)
            else:
                done.update = b
        return done

    def _buffers(
        self, m: Mine, s: OuterStep, g: Vec, prev: Done | None, u_d: float, where: str, out: list[Finding]
    ) -> Vec | None:
        """B after the step: derived from the chain (g on the first step, else from ``prev``'s), the
        sketch where the worker took one; both: the ``momentum`` stage compares them."""
        derived: Vec | None = None
        if s.first_momentum:
            derived = g
        elif prev is not None and prev.buffers is not None and prev.step.momentum:
            pb = prev.buffers
            n = s.momentum * pb.norm + (1 - s.dampening) * g.norm
            err = s.momentum * pb.err + (1 - s.dampening) * g.err + Z * u_d * (s.momentum * pb.norm + g.norm + n)
            derived = Vec(add(scale(pb.proj, s.momentum), g.proj, 1 - s.dampening), n, err)
        seen = s.momentum_after
        if seen is None:
            if derived is None:
                skip(self.stages["momentum"], "buffers of unknown origin and not sketched: the step not checked")
            return derived
        observed = Vec(seen.proj, seen.norm or 0.0, sketch_error(seen))
        if derived is None:
            skip(self.stages["momentum"], "sketched where the chain starts (loaded buffers): nothing to compare with")
            return observed
        tol = observed.err + derived.err
        err, j = diff(observed.proj, derived.proj)
        if not self.measure("momentum", err, tol, where):
            cause = f"wrong momentum or dampening (recorded momentum {s.momentum:g}, dampening {s.dampening:g})"
            what = "the momentum buffers after the step are not momentum * previous + (1 - dampening) * gradient"
            out.append(Finding("momentum", derived.proj[j], observed.proj[j], err, tol, cause, what))
        return observed

    def _step(self, d: Done, nxt: Vec, next_step: int, where: str) -> list[Finding]:
        """``d``'s step against the next round's originals ``nxt`` (its globals)."""
        s = d.step
        if s.optimizer not in LINEAR_OPTIMIZERS:
            return []
        g = self._globals(d, nxt.norm)
        if g is None:
            skip(self.stages["outer step"], "the update not known (the average or the momentum buffers missing)")
            return []
        tol = g.err + nxt.err
        err, j = diff(nxt.proj, g.proj)
        if self.measure("outer step", err, tol, where):
            return []
        cause = step_cause(d, nxt.proj, next_step, d.original.err + nxt.err, tol)
        what = (
            f"the globals after the outer step (the originals of the next round, sync step {next_step}) "
            "are not original - lr * update"
        )
        return [Finding("outer step", g.proj[j], nxt.proj[j], err, tol, cause, what, d.ref)]

    def _globals(self, d: Done, seen_norm: float | None = None) -> Vec | None:
        """The globals ``d``'s step produced, derived (original - lr * update), their budget counting
        the rounding of the step that stored them (``seen_norm``: their measured norm, else the
        bound ||original|| + lr * ||update||); None where it cannot be derived (another optimizer,
        the update unknown)."""
        s, o, u = d.step, d.original, d.update
        if s.optimizer not in LINEAR_OPTIMIZERS or u is None:
            return None
        norm = o.norm + s.lr * u.norm if seen_norm is None else seen_norm
        err = Z * roundoff(d.dtype) * (o.norm + norm + 2 * s.lr * u.norm) + o.err + s.lr * u.err
        return Vec(add(o.proj, u.proj, -s.lr), norm, err)

    def _through(self, d: Done, g: Vec, loc: Sketch, c: Sketch, m: Mine, due: bool) -> tuple[list[Finding], Vec]:
        """A send whose originals were not sketched (the worker derives them where ``d``'s step is
        derivable, ``ftrun.worker.sketch_outer``): the contribution must be ``g`` - local, ``g`` the
        globals ``d``'s step produced; one comparison proves the pseudo-gradient and (``due``)
        ``d``'s step. A failure names the likely stage. Returns the findings, then this round's
        originals for the next step: ``g`` where the contribution is what is wrong, else
        contribution + local (what torchft computed them from; its error does not grow with the chain)."""
        u_d = roundoff(c.dtype)
        c_norm = c.norm or 0.0
        loc_norm = local_norm(loc, g.norm, c)
        tol = g.err + Z * u_d * c_norm + sketch_error(c) + sketch_error(loc, loc_norm)
        want = add(g.proj, loc.proj, -1.0)
        err, j = diff(c.proj, want)
        # the originals as the send shows them; ||c + loc|| <= ||loc|| + ||c||
        seen = Vec(add(c.proj, loc.proj, 1.0), loc_norm + c_norm, tol - g.err)
        step, where = m.sync_step, f"replica {m.replica} rank {m.rank} sync step {m.sync_step}"
        lw = f"replica {m.replica} rank {m.rank} sync step {d.sync_step}"
        ok = self.measure("pseudo-gradient", err, tol, where)
        if due:
            self.measure("outer step", err, tol, lw)
        if ok:
            return (self._merge(d, g, lw) if due else []), seen
        if near(c.proj, scale(want, -1.0), tol):
            cause = "sign flipped: the contribution is local - original (the pseudo-gradient negated)"
            what = (
                "the contribution is not original - local parameters "
                f"(the originals derived from the outer step of sync step {d.sync_step})"
            )
            found = [Finding("pseudo-gradient", want[j], c.proj[j], err, tol, cause, what)]
            return found + (self._merge(d, g, lw) if due else []), g
        cause = step_cause(d, seen.proj, step, d.original.err + seen.err, tol)
        if not cause.startswith(("stale", "wrong lr")):
            cause = (
                f"the contribution is not the pseudo-gradient against the globals of sync step {d.sync_step}, or "
                f"that step's outer step is wrong ({cause})"
            )
        what = (
            f"the globals after the outer step (the originals of the next round, sync step {step}, as "
            "contribution + local) are not original - lr * update"
        )
        found = [Finding("outer step", want[j] + loc.proj[j], seen.proj[j], err, tol, cause, what, d.ref)]
        if due:
            found += self._merge(d, d.original if cause.startswith("stale") else seen, lw)
        return found, seen

    def _merge(self, d: Done, g: Vec, where: str) -> list[Finding]:
        """``d``'s merge, the globals ``g`` being the next round's originals."""
        st, s = "merge", d.step
        if not s.alpha:
            return []  # (counted in _done)
        loc, mg = s.local_sync, s.merged
        if loc is None or mg is None:
            skip(self.stages[st], "a sketch of the merge missing")
            return []
        want = add(scale(g.proj, 1.0 - s.alpha), loc.proj, s.alpha)
        mg_norm = merged_norm(mg, g.norm, loc, s.alpha)
        tol = Z * roundoff(mg.dtype) * (mg_norm + 2 * g.norm + 2 * s.alpha * (loc.norm or 0.0))
        tol += sketch_error(mg, mg_norm) + g.err + s.alpha * sketch_error(loc)
        err, j = diff(mg.proj, want)
        if self.measure(st, err, tol, where):
            return []
        if near(mg.proj, g.proj, tol):
            cause = f"alpha ignored: the merged parameters are the globals (fragment_update_alpha {s.alpha:g} unused)"
        else:
            cause = "the merge is not lerp(globals, local, alpha)"
        what = f"the merged parameters are not (1 - {s.alpha:g}) * globals + {s.alpha:g} * local"
        return [Finding(st, want[j], mg.proj[j], err, tol, cause, what, d.ref)]


def observed(s: Sketch) -> Vec:
    """A recorded sketch as a ``Vec``: its projections, its norm, its own error's budget."""
    return Vec(s.proj, s.norm or 0.0, sketch_error(s))


def step_cause(d: Done, nxt: list[float], next_step: int, stale_tol: float, tol: float) -> str:
    """Why the next round's originals ``nxt`` are not ``d``'s step: the same as ``d``'s own
    originals (stale), a step that fits another lr, or neither."""
    s, o, u = d.step, d.original, d.update
    assert u is not None
    step = add(o.proj, nxt, -1.0)  # = lr_effective * u
    uu = sum(x * x for x in u.proj)
    fit = sum(x * y for x, y in zip(step, u.proj, strict=True)) / uu if uu > 0 else 0.0
    if near(nxt, o.proj, stale_tol):
        return (
            f"stale original parameters: the next round's (sync step {next_step}) equal this round's, "
            "not the step's globals (save_parameters did not store them)"
        )
    if uu > 0 and near(add(o.proj, u.proj, -fit), nxt, tol):
        return f"wrong lr: the step fits lr {fit:.6g}, the optimizer's param_groups say {s.lr:g}"
    return (
        f"not {s.optimizer}'s update with the recorded hyper-parameters (lr {s.lr:g}, momentum "
        f"{s.momentum:g}, nesterov {s.nesterov}, weight decay {s.weight_decay:g}), or the originals "
        "changed after the commit"
    )


def local_norm(loc: Sketch, original: float, contribution: Sketch) -> float:
    """||local||: its own where recorded, else bounded by ||original|| + ||contribution|| (the worker
    does not measure it, ``ftrun.worker.sketch_outer``: local = original - contribution, which the
    pseudo-gradient stage checks; where that fails, the stage fails by far more than the bound moves)."""
    if loc.norm is not None:
        return loc.norm
    return original + (contribution.norm or 0.0)


def merged_norm(merged: Sketch, globals_: float, local_sync: Sketch, alpha: float) -> float:
    """||merged||: its own where recorded, else bounded by (1 - alpha) ||globals|| + alpha ||local_sync||
    (the merge is lerp(globals, local_sync, alpha), which the merge stage checks; the worker does not
    measure it, ``ftrun.worker.sketch_outer``)."""
    if merged.norm is not None:
        return merged.norm
    return (1.0 - alpha) * globals_ + alpha * (local_sync.norm or 0.0)


def stages_text(stages: dict[str, StageTally]) -> str:
    """The outer stages in one clause for the numerics line: checked counts, worst ratio, skips."""
    parts = []
    for name, st in stages.items():
        le = st.largest_error
        worst = f" (worst {le.ratio:.2g} of tol)" if le else ""
        skipped = sum(st.not_checked.values())
        if st.checked or skipped:
            parts.append(f"{name} {st.checked} ok{worst}" + (f" + {skipped} not checked" if skipped else ""))
    return f"; outer stages: {', '.join(parts)}" if parts else ""
