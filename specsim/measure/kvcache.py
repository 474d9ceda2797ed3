"""A model with the KV cache of one batch of sequences, fed a few tokens at a time and
rolled back by cropping (:mod:`specsim.measure.decode`'s bookkeeping)."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from specsim.measure.models import cache_keyword

__all__ = ["DecodeState"]


class DecodeState:
    """A model with the KV cache of one batch of sequences.

    For a decoder-only model the sequence is the prompt and what follows it.
    For an encoder-decoder model ``source`` (the prompt) is encoded once and the
    sequence is the decoder's, starting at ``decoder_start_token_id``.
    """

    def __init__(self, model: Any, *, batch: int, source: torch.Tensor | None = None) -> None:
        from transformers import DynamicCache, EncoderDecoderCache

        self.model = model
        self.batch = batch
        self.device: torch.device = next(model.parameters()).device
        self.encoder_decoder = bool(model.config.is_encoder_decoder)
        self._key = cache_keyword(model)
        params = inspect.signature(model.forward).parameters
        self._keep = "logits_to_keep" in params
        self.cache: Any
        self.encoder_outputs: Any = None
        if self.encoder_decoder:
            if source is None:
                raise ValueError("source: an encoder-decoder model needs the prompt as source")
            self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            with torch.inference_mode():
                self.encoder_outputs = model.get_encoder()(input_ids=source.to(self.device))
        else:
            self.cache = DynamicCache(config=model.config)

    @property
    def length(self) -> int:
        """Number of sequence positions held in the (self-attention) cache."""
        return int(self.cache.get_seq_length())

    def forward(self, tokens: torch.Tensor, *, last_only: bool = False) -> torch.Tensor:
        """Feed ``tokens`` (batch, n) after the cached positions; return their logits.

        The cache grows by ``n``. ``last_only`` asks for the last position's
        logits only (prefill and draft passes), shape (batch, 1, vocab).
        """
        tokens = tokens.to(self.device)
        if tokens.ndim != 2 or tokens.shape[0] != self.batch:
            raise ValueError(f"tokens: expected shape ({self.batch}, n), got {tuple(tokens.shape)}")
        kwargs: dict[str, Any] = {self._key: self.cache, "use_cache": True}
        if self.encoder_decoder:
            kwargs.update(decoder_input_ids=tokens, encoder_outputs=self.encoder_outputs)
        else:
            kwargs["input_ids"] = tokens
            if last_only and self._keep:
                kwargs["logits_to_keep"] = 1
        with torch.inference_mode():
            logits = self.model(**kwargs).logits
        return logits[:, -1:] if last_only else logits

    def rollback(self, length: int) -> None:
        """Forget cached positions from ``length`` on (a no-op if there are none)."""
        extra = self.length - length
        if extra > 0:
            self.cache.crop(-extra)
