"""GGUF files written from the committed tiny models read back whole; a non-GGUF file is
refused naming it (specsim.measure.gguf_write)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

_REASON = "needs the optional extra specsim[measure] (torch, safetensors, gguf)"
pytest.importorskip("torch", reason=_REASON)
gguf = pytest.importorskip("gguf", reason=_REASON)

from safetensors.numpy import load_file  # noqa: E402

from specsim.measure.gguf_write import (  # noqa: E402
    RandomLlama,
    read_gguf,
    tokenizer_fields,
    write_random_llama,
    write_tiny_gguf,
)

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
TOKENIZER = TINY / "tokenizer.json"


def test_the_tokenizer_keeps_every_token_in_id_order_with_eot_as_control() -> None:
    tok = tokenizer_fields(TOKENIZER)
    spec = json.loads(TOKENIZER.read_text(encoding="utf-8"))
    assert len(tok["tokens"]) == 4096
    assert tok["tokens"][0] == "<|endoftext|>" and tok["types"][0] == 3
    assert tok["tokens"][spec["model"]["vocab"]["Ġthe"]] == "Ġthe"
    assert len(tok["merges"]) == len(spec["model"]["merges"]) and tok["bos"] == tok["eos"] == 0


def test_the_llama_target_reads_back_with_ggml_shapes(tmp_path: Path) -> None:
    out = write_tiny_gguf(TINY / "target.safetensors", TOKENIZER, tmp_path / "t.gguf")
    s = read_gguf(out)
    assert s.architecture == "llama" and s.vocab_size == 4096
    assert len(s.tensors) == 2 + 4 * 9  # embedding, final norm, nine per layer; output tied
    assert s.tensors["token_embd.weight"] == (192, 4096)
    assert s.tensors["blk.3.ffn_down.weight"] == (512, 192)
    assert s.fields["llama.context_length"] == 128
    assert s.fields["llama.rope.dimension_count"] == 48


def test_the_gpt2_draft_is_transposed_and_q8_keeps_vectors_f32(tmp_path: Path) -> None:
    out = write_tiny_gguf(
        TINY / "draft-all.safetensors", TOKENIZER, tmp_path / "d.gguf", dtype="q8_0"
    )
    s = read_gguf(out)
    assert s.architecture == "gpt2" and s.vocab_size == 4096
    assert s.tensors["blk.0.attn_qkv.weight"] == (48, 144)  # (in, out) in GGML's order
    assert s.tensors["blk.1.ffn_down.weight"] == (192, 48)
    assert s.tensors["position_embd.weight"] == (48, 128)
    assert s.tensor_types["blk.1.ffn_down.weight"] == "Q8_0"  # rows of 192: blocks of 32
    assert s.tensor_types["blk.0.attn_qkv.weight"] == "F16"  # rows of 48: no Q8_0 blocks
    assert s.tensor_types["blk.0.attn_qkv.bias"] == "F32"


def test_q_and_k_are_permuted_to_ggml_rope_order(tmp_path: Path) -> None:
    out = write_tiny_gguf(TINY / "target.safetensors", TOKENIZER, tmp_path / "t.gguf")
    hf = load_file(str(TINY / "target.safetensors"))["model.layers.0.self_attn.q_proj.weight"]
    got = {t.name: t for t in gguf.GGUFReader(str(out)).tensors}["blk.0.attn_q.weight"]
    q = np.asarray(got.data).reshape(192, 192)
    # head 0, rows 0 and 1 in GGML are HF rows 0 and 24 (the two halves of a 48-wide head)
    assert np.array_equal(q[0], hf[0]) and np.array_equal(q[1], hf[24])
    assert not np.array_equal(q, hf)


def test_a_random_llama_is_drawn_from_the_generator(tmp_path: Path) -> None:
    shape = RandomLlama(name="r", layers=2, d_model=64, heads=4, kv_heads=2, d_ff=128)
    a = write_random_llama(shape, TOKENIZER, tmp_path / "a.gguf", np.random.default_rng(3))
    b = write_random_llama(shape, TOKENIZER, tmp_path / "b.gguf", np.random.default_rng(3))
    assert a.read_bytes() == b.read_bytes()
    s = read_gguf(a)
    assert s.tensors["blk.1.attn_k.weight"] == (64, 32) and s.fields["llama.block_count"] == 2
    assert shape.params() == 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128) + 4096 * 64


def test_a_file_that_is_not_gguf_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "weights.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ValueError, match=r"weights\.gguf: not a GGUF file"):
        read_gguf(bad)
    with pytest.raises(ValueError, match=r"tokenizer\.json: not a BPE"):
        (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Unigram"}}')
        tokenizer_fields(tmp_path / "tokenizer.json")


def test_weights_that_differ_from_their_sidecar_are_refused(tmp_path: Path) -> None:
    (tmp_path / "target.safetensors").write_bytes(
        (TINY / "target.safetensors").read_bytes()[:-4] + b"\0\0\0\0"
    )
    (tmp_path / "target.json").write_text((TINY / "target.json").read_text())
    with pytest.raises(ValueError, match=r"target\.safetensors: sha256 differs"):
        write_tiny_gguf(tmp_path / "target.safetensors", TOKENIZER, tmp_path / "t.gguf")
