"""``ftrun plan`` at the scale of the Streaming DiLoCo paper (Douillard et al., 2025, arXiv 2501.18512).

The paper's claims checked here (its Fig. 4 and Table 1):
* streaming DiLoCo keeps 95% compute utilisation from about 1-5 Gbit/s for 1B, 10B and 100B
  models; data-parallel needs about 100, 200 and 300 Gbit/s;
* Table 1 (1B model, 25B tokens): data-parallel 0.67 h with unlimited bandwidth, 109 h at
  1 Gbit/s and 441 TB exchanged; streaming DiLoCo overlapped with FP4 0.88 h and 1.10 TB.

Settings taken from the paper: the model sizes, 25B tokens, H = 100, FP4 for streaming's
exchanged values. Assumed (the README's "Against the paper" lists why): R = 2 workers;
2^20 tokens a step (512 x 2048); data-parallel all-reduces bf16 gradients, overlapping its
backward pass; the 1B step 100.8 ms (6 N T / (156 x 1e15 FLOP/s x 0.4 MFU)), which makes
Table 1's 0.67 h of pure compute; the same compute per replica for every size (step grows
with N); F = 10 fragments (torchft needs F to divide H; the paper's 3-layer fragments of a
24-layer model would be 8), tau = 1; latency 0.
"""

from __future__ import annotations

import pytest

from ftrun.commands.plan import PlanRequest, plan_inputs
from ftrun.link_spec import LinkSpec
from ftrun.plan import data_parallel_hiding_bandwidth, hiding_bandwidth, simulate, simulate_data_parallel

TOKENS_PER_STEP = 2**20
TRAIN_TOKENS = 25e9
PAPER_STREAMING_95 = (1e9, 5e9)  # Fig. 4: 1-5 Gbit/s for every size
PAPER_DP_95 = {1e9: 100e9, 1e10: 200e9, 1e11: 300e9}


def paper_request(params: float) -> PlanRequest:
    return PlanRequest(
        params=params,
        dtype="fp4",
        dp_dtype="bf16",
        tokens_per_step=TOKENS_PER_STEP,
        flops_per_gpu=1e15,
        gpus_per_replica=156,
        mfu=0.4,
        replicas=2,
        sync_every=100,
        fragments=10,
        fragment_sync_delay=1,
        data_parallel=True,
    )


def within_2x(got: float, want: float) -> bool:
    return 0.5 <= got / want <= 2.0


@pytest.mark.parametrize("params", [1e9, 1e10, 1e11])
def test_95_percent_utilisation_bandwidth_streaming_vs_data_parallel(params: float) -> None:
    work, sched, _, _, grad_bytes = plan_inputs(paper_request(params))
    streaming = hiding_bandwidth(work, sched, 0.0, 0.95, 1e6, 1e13)
    dp = data_parallel_hiding_bandwidth(work, grad_bytes, 0.0, 0.95, 1e6, 1e13)
    lo, hi = PAPER_STREAMING_95
    assert lo / 2 <= streaming <= hi * 2, streaming  # ~2.6 Gbit/s at every size
    assert dp / streaming > 50  # the paper's two orders of magnitude
    if params == 1e9:
        # 2.2x the paper's 100 Gbit/s: 16 Gbit of bf16 gradients a 100 ms step cannot move at
        # 100 Gbit/s with any overlap; the paper's Fig. 4 1B setting must differ (README)
        assert dp / PAPER_DP_95[params] == pytest.approx(2.2, abs=0.1)
    else:
        assert within_2x(dp, PAPER_DP_95[params]), dp


def test_table_1_hours_at_1_gbit_and_bytes_exchanged() -> None:
    work, sched, _, _, grad_bytes = plan_inputs(paper_request(1e9))
    steps = TRAIN_TOKENS / TOKENS_PER_STEP

    def hours(p) -> float:
        return steps / p.steps_per_s / 3600

    def sent(p) -> float:
        return p.bits_on_wire / 8 / p.steps * steps

    unlimited = LinkSpec(1e12, 0.0)
    gbit = LinkSpec(1e9, 0.0)
    dp_inf = simulate_data_parallel(work, grad_bytes, unlimited.bandwidth_bps, 0.0)
    dp_1g = simulate_data_parallel(work, grad_bytes, gbit.bandwidth_bps, 0.0)
    st_1g = simulate(work, sched, gbit.bandwidth_bps, 0.0)
    assert hours(dp_inf) == pytest.approx(0.67, rel=0.01)  # an input: the step was chosen to give it
    assert within_2x(hours(dp_1g), 109.0)  # 106 h
    assert within_2x(hours(st_1g), 0.88)  # 0.87 h
    # bytes: ftrun counts what one replica sends on its uplink; the paper's figures are 9.2x
    # that for both rows (the 400x between them agrees): its accounting is not per replica
    assert sent(dp_1g) / sent(st_1g) == pytest.approx(441 / 1.10, rel=0.01)
    assert 441e12 / sent(dp_1g) == pytest.approx(9.25, rel=0.02)
    assert 1.10e12 / sent(st_1g) == pytest.approx(9.25, rel=0.02)
