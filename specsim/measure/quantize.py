"""Quantized weight formats for measured models: int8 (torch's dynamic quantization of
the linear layers) and int4 in groups (torch's packed int4 kernel), applied to a model
:func:`specsim.measure.models.build_model` made (:func:`quantize_weights`)."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch

from specsim.measure.presets import QUANT_FORMATS

__all__ = ["QUANT_FORMATS", "INT4_GROUP_SIZES", "int4_supported", "quantize_weights"]


# Weight formats ----------------------------------------------------------------------------
INT4_GROUP_SIZES = (32, 64, 128, 256)
"""Group sizes torch's packed int4 kernels take (``_weight_int4pack_mm*``)."""


def int4_supported(device: str | torch.device = "cpu") -> str:
    """Empty if this torch build runs packed int4 matmuls on ``device`` (tried on a 32 x 64
    weight, not assumed; torch 2.13's CPU build does), else why not."""
    dev = torch.device(device)
    try:
        layer = _Int4Linear(torch.nn.Linear(64, 32, bias=False, device=dev), group_size=32)
        layer(torch.ones(1, 64, device=dev))
    except (AttributeError, RuntimeError, NotImplementedError) as exc:
        return f"torch {torch.__version__} cannot run packed int4 on {dev.type}: {exc}"
    return ""


class _Int4Linear(torch.nn.Module):
    """A linear layer with int4 weights in groups (one scale and zero point per group of
    ``group_size`` inputs, gpt-fast's ``WeightOnlyInt4Linear`` layout), multiplied by torch's
    packed int4 kernel: the weight is dequantized inside the kernel, the activations stay in
    their dtype. Asymmetric rounding: ``w = (q - 8) * scale + zero``, ``q`` in 0..15."""

    def __init__(self, linear: torch.nn.Linear, *, group_size: int) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        n, k = w.shape
        if k % group_size:
            raise ValueError(f"group_size: {group_size} does not divide in_features {k}")
        groups = w.reshape(n, k // group_size, group_size)
        low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
        scale = (high - low).clamp(min=1e-6) / 15
        q = ((groups - low) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        cpu = w.device.type == "cpu"
        dtype = linear.weight.dtype if not cpu else torch.float32
        self.on_cpu, self.group_size, self.out_features = cpu, group_size, n
        sz = torch.stack([scale.reshape(n, -1).t(), (low + 8 * scale).reshape(n, -1).t()], -1)
        self.scales_and_zeros = sz.to(dtype).contiguous()
        if cpu:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        else:  # CUDA: uint8 nibbles, the kernel's inner tiling 8 (untested: no GPU here)
            nib = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
            packed = torch.ops.aten._convert_weight_to_int4pack(nib, 8)
        self.packed = packed
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        op = (
            torch.ops.aten._weight_int4pack_mm_for_cpu
            if self.on_cpu
            else torch.ops.aten._weight_int4pack_mm
        )
        y = op(
            flat.to(self.scales_and_zeros.dtype),
            self.packed,
            self.group_size,
            self.scales_and_zeros,
        ).to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


class _Int8Linear(torch.nn.Module):
    """Weight-only int8 with a scale per output channel (gpt-fast's ``WeightOnlyInt8Linear``),
    for the GPU, where torch's dynamic quantization (CPU kernels only) does not run."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127
        self.weight = (w / scale[:, None]).round().to(torch.int8)
        self.scales = scale.to(linear.weight.dtype)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x, self.weight.to(x.dtype)) * self.scales
        return y if self.bias is None else y + self.bias


def _linearized(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with GPT-2's ``Conv1D`` (``x @ W + b``, W of shape (in, out)) replaced by the
    equal ``nn.Linear``, so that quantization finds them."""
    from transformers.pytorch_utils import Conv1D

    for name, child in list(model.named_children()):
        if isinstance(child, Conv1D):
            w = child.weight.detach()
            lin = torch.nn.Linear(w.shape[0], w.shape[1], device=w.device, dtype=w.dtype)
            with torch.no_grad():
                lin.weight.copy_(w.t())
                lin.bias.copy_(child.bias.detach())
            setattr(model, name, lin)
        else:
            _linearized(child)
    return model


def _replace_linears(model: torch.nn.Module, make: Any) -> None:
    for name, child in list(model.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, make(child))
        else:
            _replace_linears(child, make)


def quantize_weights(model: Any, weights: str, *, group_size: int = 128) -> tuple[Any, str]:
    """A copy of ``model`` whose linear layers hold ``weights`` (:data:`QUANT_FORMATS`), and
    the method used; ``model`` itself when the format is the model's own dtype.

    - ``int8`` of a float32 model on the CPU: :func:`torch.ao.quantization.quantize_dynamic`
      (int8 weights per tensor, activations quantized per pass, int8 GEMMs): ``"dynamic"``;
      elsewhere weight-only int8 (:class:`_Int8Linear`): ``"weight-only"``.
    - ``int4``: weight-only, groups of ``group_size`` (:class:`_Int4Linear`, torch's packed
      int4 kernels): ``"weight-only"``; a ValueError where the build lacks them
      (:func:`int4_supported`).

    Every ``nn.Linear`` is converted, the LM head included (as gpt-fast's quantize.py
    does; for int4 only those with a multiple of 16 outputs, as the kernel needs); GPT-2's
    ``Conv1D`` projections are first turned into ``nn.Linear``.
    """
    if weights not in QUANT_FORMATS:
        raise ValueError(f"weights: unknown format {weights!r}; expected one of {QUANT_FORMATS}")
    dtype = next(model.parameters()).dtype
    own = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if weights in own:
        if own[weights] != dtype:
            raise ValueError(f"weights: {weights!r} differs from the model's dtype {dtype}")
        return model, "none"
    device = next(model.parameters()).device
    if weights == "int4":
        if group_size not in INT4_GROUP_SIZES:
            raise ValueError(f"group_size: int4 takes {INT4_GROUP_SIZES}, got {group_size!r}")
        why = int4_supported(device)
        if why:
            raise ValueError(f"weights: int4: {why}")
    out = _linearized(copy.deepcopy(model))
    if weights == "int4":  # the packed kernel needs out_features divisible by 16
        _replace_linears(
            out,
            lambda lin: (
                _Int4Linear(lin, group_size=group_size) if lin.out_features % 16 == 0 else lin
            ),
        )
        return out.eval(), "weight-only"
    if device.type != "cpu" or dtype != torch.float32:  # dynamic int8: float32 CPU kernels
        _replace_linears(out, _Int8Linear)
        return out.eval(), "weight-only"
    with warnings.catch_warnings():
        # torch.ao.quantization warns that it is deprecated; it still runs in torch 2.13,
        # and it is the dynamic int8 path this measurement asks for.
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(out, {torch.nn.Linear}, dtype=torch.qint8)
    return q.eval(), "dynamic"
