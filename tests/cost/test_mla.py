"""Multi-head latent attention: KV bytes per token against DeepSeek's figures, attention cost."""

from __future__ import annotations

import pytest

from specsim.cards import load_hardware, load_model
from specsim.cost import Formats, footprint, step_cost

V3 = load_model("deepseek-v3")


def test_deepseek_v3_kv_bytes_per_token_is_the_published_figure() -> None:
    # DeepSeek-V2 (arXiv:2405.04434), Table 1: MLA caches (d_c + d_h^R) l = 4.5 d_h l
    # elements per token, with d_c = 4 d_h and d_h^R = d_h / 2 (Section 2.1.2); DeepSeek-V3
    # keeps d_c = 512, d_h^R = 64 (d_h = 128) over l = 61 layers: 35,136 elements, so
    # 70,272 bytes (about 70 KB) per token in bf16.
    published = 4.5 * 128 * 61
    assert V3.kv_bytes_per_token(1.0) == published == 35_136
    assert V3.kv_bytes_per_token(2.0) == 70_272
    # Multi-head attention with 128 heads of 128 (keys and values) would cache 2 n_h d_h l.
    assert 2 * 128 * 128 * 61 / published == pytest.approx(57.0, rel=0.01)
    # Kimi K2 shares the latent shape: the same bytes per token and layer.
    assert load_model("kimi-k2").kv_bytes_per_token(2.0) == 70_272


@pytest.mark.parametrize("tp", [1, 8, 16])
def test_the_latent_is_held_whole_on_every_tensor_parallel_device(tp: int) -> None:
    fp = footprint(V3, tensor_parallel=tp, formats=Formats.of("bfloat16"))
    assert fp.kv_bytes_per_token == 70_272 and fp.kv_bytes_per_token_layer == 576 * 2


def test_absorbed_attention_costs_per_cached_token() -> None:
    hw = load_hardware("h200")
    short = step_cost(V3, hw, batch=1, context=0, new_tokens=1, tensor_parallel=8)
    long = step_cost(V3, hw, batch=1, context=4096, new_tokens=1, tensor_parallel=8)
    # Per (query, key) pair and layer, each of 128 heads scores the 512-wide latent and the
    # 64-wide rotary key and sums the latent: 2 (512 + 64 + 512) flops (DeepSeek-V2,
    # Section 2.1.2: W_UK absorbed into the query, W_UV into the output).
    per_pair = V3.layers * V3.heads * 2 * (512 + 64 + 512)
    assert long.flops - short.flops == pytest.approx(4096 * per_pair, rel=1e-12)
    # Each cached token's latent is read once per layer and device (float8 KV here).
    assert long.kv_bytes - short.kv_bytes == pytest.approx(4096 * 61 * 576 * 8, rel=1e-12)


def test_a_dense_card_keeps_its_kv_bytes() -> None:
    m = load_model("llama-2-7b")
    assert m.mla_spec is None and m.kv_bytes_per_token(2.0) == 32 * 2 * 4096 * 2


def test_hardware_free_flops_use_the_absorbed_attention() -> None:
    from specsim.cost import pass_flops

    per_pair = V3.layers * V3.heads * 2 * (512 + 64 + 512)
    got = pass_flops(V3, batch=1, context=1000, new_tokens=1)
    assert got == pytest.approx(2 * V3.decode_params + 1001 * per_pair, rel=1e-12)
