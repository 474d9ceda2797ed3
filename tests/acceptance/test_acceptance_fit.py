"""Acceptance processes fitted by maximum likelihood: known answers first, then the real data."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.acceptance import fit as af
from specsim.acceptance import goodness as ag
from specsim.acceptance.processes import MarkovAcceptance
from specsim.theory import expected_tokens


def _fit(seqs: list) -> af.CellFit:
    """The three fits, the Markov one from its start near the i.i.d. fit only (fast)."""
    return af.CellFit(af.fit_iid(seqs), af.fit_positional(seqs), af.fit_markov(seqs, starts=0))


def _markov_flags(rng: np.random.Generator, proc: MarkovAcceptance, m: int, n: int) -> list:
    out = []
    for _ in range(m):
        d = proc.sample(rng, n)
        out.append(d.u < d.prob)
    return out


def test_segment_cuts_blocks_as_the_simulator_consumes_them() -> None:
    flags = [np.array([1, 1, 0, 1, 1, 1, 0, 0, 1], dtype=bool)]
    seg = af.segment(flags, 2)
    # blocks: [1,1] full (bonus at 2), [1,1] full at 3-4 (bonus 5), [0] at 6, [0] at 7, [1,?] cut
    assert seg.counts.tolist() == [2, 2, 0, 0]
    assert seg.observed[0].tolist() == [1, 1, 0, 1, 1, 0, 1, 1, 0]
    with pytest.raises(ValueError, match="gamma"):
        af.segment(flags, 0)
    with pytest.raises(ValueError, match=r"sequences\[0\]"):
        af.segment([np.array([0, 2])], 2)


def test_iid_data_is_recovered_and_not_rejected() -> None:
    rng = np.random.default_rng(3)
    seqs = [rng.random(120) < 0.6 for _ in range(20)]
    cf = _fit(seqs)
    a, se = cf.iid.params[0], cf.iid.se[0]
    assert abs(a - 0.6) <= 4.5 * se
    for k, (ak, sk) in enumerate(zip(cf.positional.params[:4], cf.positional.se[:4], strict=True)):
        assert abs(ak - 0.6) <= 4.5 * sk, k
    assert cf.iid.bic < cf.markov.bic and cf.iid.bic < cf.positional.bic
    key = ("d", 1.0, "c")
    gof = ag.gof_table({key: seqs}, {key: cf})
    iid = gof[gof.process == "iid"]
    assert (iid.p_value > 1e-3).all(), iid
    tok = ag.tokens_table({key: seqs}, {key: cf})
    assert (tok.z_iid.abs() <= 4.5).all()
    np.testing.assert_allclose(tok.theorem, [expected_tokens(a, g) for g in range(1, 9)])


def test_markov_data_recovers_parameters_and_prefers_markov() -> None:
    truth = MarkovAcceptance(alphas=(0.95, 0.1), weights=(0.5, 0.5), persistence=0.95)
    seqs = _markov_flags(np.random.default_rng(7), truth, 60, 200)
    cf = _fit(seqs)
    for est, se, true in zip(cf.markov.params, cf.markov.se, (0.95, 0.1, 0.5, 0.95), strict=True):
        assert abs(est - true) <= 4.5 * se, (cf.markov.params, cf.markov.se)
    assert cf.markov.aic < cf.iid.aic - 10 and cf.markov.bic < cf.iid.bic
    key = ("d", 1.0, "c")
    gof = ag.gof_table({key: seqs}, {key: cf}, gammas=(4, 8))
    assert (gof[gof.process == "iid"].p_value < 1e-3).all()
    mean = {key: float(np.mean(np.concatenate(seqs)))}  # the stationary acceptance rate
    tok = ag.tokens_table({key: seqs}, {key: cf}, alpha_mean=mean, gammas=(2, 4))
    # Equation (1) at the mean acceptance overstates tokens per block on bursty data (blocks
    # start more often in the hard state: expected z about +5); the Markov process closes it.
    assert (tok.z_theorem > 3).all(), tok[["measured", "measured_se", "theorem"]]
    assert (tok.z_markov.abs() <= 4.5).all(), tok
    for g in (2, 4):
        assert cf.markov.tokens(g)[0] == pytest.approx(
            ag.block_law(cf.markov, g) @ np.arange(1, g + 2), rel=0.05
        )


def test_block_laws_sum_to_one() -> None:
    rng = np.random.default_rng(1)
    seqs = [rng.random(120) < 0.5 for _ in range(6)]
    markov = MarkovAcceptance(alphas=(0.9, 0.2), weights=(0.3, 0.7), persistence=0.6)
    cf = af.fit_cell(seqs)
    assert [name for name, _ in cf.items()] == ["iid", "positional", "markov"]
    fits = [
        cf.iid,
        cf.positional,
        cf.markov,
        af.Fitted(
            markov, (0.9, 0.2, 0.3, 0.6), (0.0,) * 4, 0.0, 1, lambda p, g: markov.mean_tokens(g)
        ),
    ]
    for fit in fits:
        for g in (1, 3, 8):
            law = ag.block_law(fit, g)
            assert law.shape == (g + 1,)
            assert law.sum() == pytest.approx(1.0)


def test_committed_real_cell() -> None:
    from specsim.acceptance.realtext import read_alpha_positions

    try:
        pos = read_alpha_positions()
    except FileNotFoundError:
        pytest.skip("models/measured/real is not in this checkout")
    by = af.sequences_by_cell(pos)
    key = ("draft-distil", 1.0, "en")
    assert len(by[key]) == 8 and all(s.shape == (96,) for s in by[key])
    cf = _fit(by[key])
    sub = {key: by[key]}
    table = af.fit_table({key: cf})
    assert set(table.process) == {"iid", "positional", "markov"}
    assert np.isfinite(table.loglik).all()
    # The MLE of the i.i.d. alpha is the share of accepted observed flags.
    obs = af.segment(by[key], af.FIT_GAMMA).observed
    share = np.mean(np.concatenate([s[o] for s, o in zip(by[key], obs, strict=True)]))
    assert cf.iid.params[0] == pytest.approx(share)
    tok = ag.tokens_table(sub, {key: cf}, gammas=(1, 4))
    assert ((tok.measured >= 1) & (tok.measured <= tok.gamma + 1)).all()
    gof = ag.gof_table(sub, {key: cf}, gammas=(2,))
    assert ((gof.p_value >= 0) & (gof.p_value <= 1)).all()
