import numpy as np
import pytest

from specsim.validate import assumptions_dropped, blocks_needed, check_grid


def test_small_grid_passes_and_intervals_are_tight_enough() -> None:
    df = check_grid(np.random.default_rng(3), alphas=(0.1, 0.5, 0.95), gammas=(1, 4, 10),
                    cs=(0.0, 0.2), relative=0.01)  # fmt: skip
    assert df["ok"].all(), df.loc[~df["ok"]]
    e = df[df.quantity == "tokens_per_pass"]
    half = (e["ci_high"] - e["ci_low"]) / 2
    assert (half / e["simulated"] < 0.012).all()
    # Standardized errors look standard normal, not degenerate (a test that can fail).
    assert 0.4 < df["z"].std() < 2.0


def test_blocks_needed_grows_with_variance() -> None:
    assert blocks_needed(0.9, 10) > blocks_needed(0.9, 1)


def test_assumptions_table_shows_known_directions() -> None:
    df = assumptions_dropped(np.random.default_rng(1), tokens=20_000)
    base = df[df["assumption dropped"] == "none"].iloc[0]
    assert abs(base.error_pct) < 2.0
    batch = df[df["assumption dropped"] == "batch 1"].iloc[0]
    assert batch.error_pct > 10.0  # the formula over-predicts once passes are shared by 64


@pytest.mark.parametrize("bad", [0, -0.01, float("nan")])
def test_bad_relative_and_z_are_errors(bad: float) -> None:
    with pytest.raises(ValueError, match="relative"):
        blocks_needed(0.5, 3, relative=bad)
    with pytest.raises(ValueError, match="z:"):
        check_grid(np.random.default_rng(0), alphas=(0.5,), gammas=(1,), cs=(0.0,), z=bad)
