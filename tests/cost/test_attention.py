"""Local and sparse attention layers in the cost model (specsim/cost/attention.py).

The oracle is a brute-force count, query by query, of the keys each kind of layer sees and
the cached tokens each sequence's pass reads (the module docstring's rules); the sums
formulas must equal it for equal chains and bound it where the docstring says so.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specsim.cards import ModelCard, list_models, load_hardware, load_model
from specsim.cost import step_cost, step_cost_grid
from specsim.cost.attention import AttentionCosts, _local_sums, kv_bytes_held
from specsim.cost.formats import Formats
from specsim.cost.memory import footprint
from specsim.cost.roofline import roofline
from specsim.cost.shape import PassShape

GEMMA = load_model("gemma-3-27b")
SCOUT = load_model("llama-4-scout")
V32 = load_model("deepseek-v3.2")


def _global(card: ModelCard) -> ModelCard:
    return dataclasses.replace(card, attention=None)


def _all_local(card: ModelCard, kind: str, window: int) -> ModelCard:
    return dataclasses.replace(card, attention={"kind": kind, "window": window})


# The oracle -----------------------------------------------------------------------------------
def _visible(kind: str, size: int, p: int) -> int:
    """Keys a query at position p (from 0) sees."""
    if kind == "chunked":
        return p % size + 1
    return min(p + 1, size)  # a sliding window, or the top_k a sparse query selects


def _cached_read(kind: str, size: int, c: int, n: int) -> int:
    """Cached tokens (positions < c) one sequence's pass of n new positions reads."""
    if kind == "chunked":
        return c % size
    if kind == "sparse":
        return n * min(c, size)  # each query gathers its own selection
    return min(c, size - 1)  # the first query's window, itself excluded


def _exact(kind: str, size: int, shape: PassShape) -> tuple[float, float]:
    """(pairs, cached tokens read) of one local layer over the pass, query by query."""
    pairs = cached = 0
    for c, n in zip(shape.context.tolist(), shape.new.tolist(), strict=True):
        depths = shape.depths or tuple(range(1, n + 1))
        pairs += sum(_visible(kind, size, c + d - 1) for d in depths)
        cached += _cached_read(kind, size, c, n)
    return float(pairs), float(cached)


def _sums(kind: str, size: int, shape: PassShape) -> tuple[float, float]:
    ac = AttentionCosts(kind=kind, size=float(size), local_share=1.0)
    T, S, R = shape.sums()
    pairs, cached = _local_sums(ac, T=T, S=S, cached=R, B=float(shape.batch))
    return float(pairs), float(cached)


CHAINS = [  # (context, new, batch): below, across and above the window / chunk of 64
    (10, 1, 1),
    (10, 5, 3),
    (60, 9, 2),
    (63, 1, 4),
    (64, 3, 1),
    (100, 7, 5),
    (127, 2, 2),
    (130, 40, 1),
    (0, 200, 1),  # a prefill of three chunks and more
    (500, 16, 8),
]


@pytest.mark.parametrize("kind", ["sliding-window", "chunked", "sparse"])
@pytest.mark.parametrize(("context", "new", "batch"), CHAINS)
def test_the_sums_are_exact_for_equal_chains(kind: str, context: int, new: int, batch: int) -> None:
    shape = PassShape.chain(context=context, new=new, batch=batch)
    got, want = _sums(kind, 64, shape), _exact(kind, 64, shape)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("kind", ["sliding-window", "sparse"])
def test_unequal_contexts_are_bounded_above_for_windows(kind: str) -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        ctx = rng.integers(0, 300, size=6)
        shape = PassShape.chain(context=ctx, new=3)
        (p, r), (pe, re) = _sums(kind, 64, shape), _exact(kind, 64, shape)
        assert p >= pe - 1e-9 and r >= re - 1e-9


@pytest.mark.parametrize("context", [0, 5, 40, 64, 90, 300])
def test_trees_on_one_side_of_the_window_are_exact(context: int) -> None:
    parents = [-1, 0, 0, 1, 1, 2, 3, 3]  # depth 4: below (c + 4 <= 64) or above (c >= 64)
    shape = PassShape.tree(context=context, parents=parents, batch=3)
    got, want = _sums("sliding-window", 64, shape), _exact("sliding-window", 64, shape)
    if context + 4 <= 64 or context >= 64:
        assert got == pytest.approx(want)
    else:
        assert got[0] >= want[0]  # straddling: the mean query's bound


@pytest.mark.parametrize("context", [3, 70, 130, 1000])
def test_trees_within_one_chunk_are_exact(context: int) -> None:
    shape = PassShape.tree(context=context, parents=[-1, 0, 0, 1, 2], batch=2)
    assert _sums("chunked", 64, shape) == pytest.approx(_exact("chunked", 64, shape))


# The roofline ---------------------------------------------------------------------------------
@pytest.mark.parametrize("card", [GEMMA, SCOUT])
@pytest.mark.parametrize(("context", "new"), [(0, 300), (200, 1), (800, 5), (1000, 20)])
def test_a_local_layer_below_its_window_costs_what_a_global_one_does(
    card: ModelCard, context: int, new: int
) -> None:
    hw = "h200"
    tp = 1 if card is GEMMA else 4
    if card is GEMMA and context + new > 1024:
        pytest.skip("beyond Gemma's window")
    a = step_cost(card, hw, batch=4, context=context, new_tokens=new, tensor_parallel=tp)
    b = step_cost(_global(card), hw, batch=4, context=context, new_tokens=new, tensor_parallel=tp)
    for name in ("time_s", "flops", "bytes", "energy_j", "kv_bytes", "resident_bytes"):
        assert getattr(a, name) == pytest.approx(getattr(b, name), rel=1e-12), name


@pytest.mark.parametrize("kind", ["sliding-window", "chunked"])
def test_above_its_window_a_local_model_is_flat_in_context(kind: str) -> None:
    """Every layer local (no global one): beyond the window a pass costs the same at any
    context (a chunked layer: at the same place in its chunk); a global model grows."""
    card = _all_local(load_model("gemma-3-4b"), kind, 1024)
    far = [1024 * k + 100 for k in (1, 4, 16, 60)]
    times = [step_cost(card, "h100-sxm", batch=2, context=c, new_tokens=4).time_s for c in far]
    assert times == pytest.approx([times[0]] * len(far), rel=1e-12)
    glob = [step_cost(_global(card), "h100-sxm", batch=2, context=c, new_tokens=4) for c in far]
    assert glob[-1].time_s > 1.5 * glob[0].time_s


def test_a_chunked_layer_is_cheapest_at_the_start_of_a_chunk() -> None:
    card = _all_local(load_model("gemma-3-4b"), "chunked", 4096)
    end, start = (
        step_cost(card, "h100-sxm", batch=8, context=c, new_tokens=1) for c in (4095, 4096)
    )
    assert end.kv_bytes > 10 * start.kv_bytes and end.time_s > start.time_s


def test_gemma_reads_its_global_layers_share_of_the_cache_at_long_context() -> None:
    """Gemma 3 27B: 10 of 62 layers global; at 100k tokens the pass reads about 10/62 of the
    cache a global model reads (the 52 local layers read 1023 tokens each)."""
    a = step_cost(GEMMA, "h200", batch=1, context=100_000, new_tokens=1)
    b = step_cost(_global(GEMMA), "h200", batch=1, context=100_000, new_tokens=1)
    kv_token = (
        62
        * footprint(
            GEMMA, tensor_parallel=1, formats=Formats.of("bfloat16")
        ).kv_bytes_per_token_layer
    )
    want = (10 * 100_000 + 52 * 1023) / 62 * kv_token + 2 * kv_token  # + the new token
    assert a.kv_bytes == pytest.approx(want, rel=1e-12)
    assert b.kv_bytes == pytest.approx((100_000 + 2) * kv_token, rel=1e-12)
    assert a.time_s < b.time_s


def test_sparse_attention_reads_top_k_per_query_and_indexes_every_key() -> None:
    """DeepSeek-V3.2: beyond top_k the main attention's reads are flat, the indexer's grow
    with the context at its small keys (132 bytes a token and layer, not the latent's); over
    the 8 devices (kv_bytes is a total), each holding the latent and the keys whole."""

    def kv(card: ModelCard, c: int, n: int = 1) -> float:
        return step_cost(card, "h200", batch=2, context=c, new_tokens=n, tensor_parallel=8).kv_bytes

    fm = Formats.of(V32.dtype)
    latent = 61 * footprint(V32, tensor_parallel=8, formats=fm).kv_bytes_per_token_layer
    index = 61 * 132.0
    for c in (4096, 65_536):
        want = 2 * (min(c, 2048) * latent + 2 * latent) + (2 * c + 2 * 2) * index
        assert kv(V32, c) == pytest.approx(8 * want, rel=1e-12)
    four = 2 * 4 * 2048 * latent + 8 * 2 * latent + (2 * 65_536 + 8 * 2) * index
    assert kv(V32, 65_536, 4) == pytest.approx(8 * four, rel=1e-12)  # four selections a sequence
    v3 = dataclasses.replace(V32, attention=None, params=671_000_000_000)
    assert kv(v3, 65_536) > 3 * kv(V32, 65_536)  # the latent (1152 B) of every key vs 132 B


def test_sparse_attention_counts_the_indexer_flops_and_weights() -> None:
    a = step_cost(V32, "h200", batch=1, context=100_000, new_tokens=1, tensor_parallel=8)
    co = roofline(V32, load_hardware("h200"), Formats.of(V32.dtype), 8.0)
    assert co.attention is not None
    index_flops = 61 * 2 * 64 * 129 * (100_001)  # every visible key of the one query
    main_flops = co.flops_per_pair * 2048
    dense = co.flops_per_token
    assert a.flops == pytest.approx(8 * (dense + main_flops + index_flops), rel=1e-9)
    # The indexer's projections are weights of every layer (wq_b, wk, k_norm, weights_proj).
    base = dataclasses.replace(V32, attention=None, params=671_000_000_000)
    assert (
        V32.decode_layer_params - base.decode_layer_params
        == 1536 * 64 * 128 + 7168 * 128 + 256 + 7168 * 64
    )


def test_grids_match_single_passes() -> None:
    ctx = np.array([100, 900, 2000, 8000, 60_000])
    grid = step_cost_grid(GEMMA, "h200", batch=3, context=ctx, new_tokens=4)
    one = [step_cost(GEMMA, "h200", batch=3, context=int(c), new_tokens=4).time_s for c in ctx]
    assert np.asarray(grid.time_s) == pytest.approx(one, rel=1e-12)


def test_no_shipped_card_without_the_table_enters_the_module() -> None:
    hw = load_hardware("h200")
    for card in list_models():
        co = roofline(card, hw, Formats.of("bfloat16"), 1.0)
        assert (co.attention is None) == (card.attention_spec is None), card.slug


# The footprint --------------------------------------------------------------------------------
def test_a_windowed_layer_holds_only_its_window() -> None:
    fm = Formats.of("bfloat16")
    per_layer = footprint(GEMMA, tensor_parallel=1, formats=fm).kv_bytes_per_token_layer
    for c in (10, 1024, 5000, 131_072):
        held = kv_bytes_held(GEMMA, context=c, tensor_parallel=1, formats=fm)
        assert held == (10 * c + 52 * min(c, 1024)) * per_layer
    g = kv_bytes_held(_global(GEMMA), context=5000, tensor_parallel=1, formats=fm)
    assert g == 5000 * footprint(GEMMA, tensor_parallel=1, formats=fm).kv_bytes_per_token


def test_the_pass_holds_the_window_and_the_index_keys() -> None:
    """resident_bytes of a pass: a local layer holds at most its window a sequence; a sparse
    card holds its index keys beside the latent (footprint's bytes per token)."""
    near, far = (
        step_cost(
            _all_local(GEMMA, "sliding-window", 1024), "h200", batch=4, context=c, new_tokens=1
        )
        for c in (3000, 30_000)
    )
    assert near.resident_bytes == far.resident_bytes
    fm = Formats.of(V32.dtype)
    fp = footprint(V32, tensor_parallel=8, formats=fm)
    assert fp.kv_bytes_per_token == 61 * (fp.kv_bytes_per_token_layer + 132)
    one = step_cost(V32, "h200", batch=2, context=10_000, new_tokens=1, tensor_parallel=8)
    assert one.resident_bytes - fp.weights_bytes == pytest.approx(
        2 * 10_001 * fp.kv_bytes_per_token, rel=1e-12
    )
