"""Which deployments and model pairs each fidelity family's predictions stand for.

A :class:`Coverage` names the hardware card (or cards), the stack (the runtime profile's slug,
or the card's default profile when the plan has no ``--runtime``; None: the card's own numbers, no
profile), the weight formats, the proposer kinds (``none``: plain decoding) and the model
pairs (target, and the draft or head card where the family has one; None: plain decoding)
that the family's prediction ran through. A speculative run's speedup over plain checks the
plain prediction too, so draft families cover ``none`` and the target alone. Families
predicted without the cost model (the timed passes, the tiny real models) check the
simulator, not a card, and cover no deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COVERAGE", "Coverage", "Pair"]

Pair = tuple[str, str | None]
"""(target card slug, draft or head card slug; None: plain decoding of the target)."""


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """The deployments and model pairs a fidelity family's predictions stand for (module
    docstring). ValueError for no pairs, or a kind list that disagrees with the pairs (a
    plain pair needs kind ``none``, a drafted pair a speculative kind)."""

    hardware: str | tuple[str, ...]
    runtime: str | None
    weights: tuple[str, ...]
    kinds: tuple[str, ...]
    pairs: tuple[Pair, ...]

    def __post_init__(self) -> None:
        if isinstance(self.hardware, str):  # one card, or the cards a family's rows ran on
            object.__setattr__(self, "hardware", (self.hardware,))
        if not self.pairs:
            raise ValueError(f"coverage of {self.hardware}: pairs: expected at least one pair")
        plain = any(d is None for _, d in self.pairs)
        drafted = any(d is not None for _, d in self.pairs)
        spec = [k for k in self.kinds if k != "none"]
        if plain != ("none" in self.kinds) or drafted != bool(spec):
            raise ValueError(
                f"coverage of {self.hardware}: kinds {self.kinds} disagree with pairs "
                f"{self.pairs} (plain pairs need 'none', drafted pairs a speculative kind)"
            )


def _pairs(target: str, *drafts: str) -> tuple[Pair, ...]:
    return ((target, None), *((target, d) for d in drafts))


_CPU_GPT = "CPU runs, gpt-like-97m + gpt-like-6m (calibrated card)"
_CPU_LLAMA = "CPU runs, llama-160m + llama-68m (calibrated card)"
_ROWS = "CPU interleaved runs, {pair} (runtime profile{joint})"
_JOINT = " fitted on fp32, int8 and int4 passes"
_LOSO = "plain decode steps, leave-one-source-out: {stack}"
_KEPT = "plain decode steps, previous numbers kept: {stack}"
_GPT = _pairs("gpt-like-97m", "gpt-like-6m")
_LLAMA = _pairs("llama-160m", "llama-68m")


def _cpu(hardware: str, runtime: str | None, pairs: tuple[Pair, ...]) -> Coverage:
    """A CPU family: float32 runs, plain and drafted."""
    return Coverage(
        hardware=hardware,
        runtime=runtime,
        weights=("float32",),
        kinds=("none", "draft"),
        pairs=pairs,
    )


def _plain(
    hardware: str | tuple[str, ...], runtime: str, weights: tuple[str, ...], *targets: str
) -> Coverage:
    return Coverage(
        hardware=hardware,
        runtime=runtime,
        weights=weights,
        kinds=("none",),
        pairs=tuple((t, None) for t in targets),
    )


_TPU = Coverage(
    hardware="tpu-v4",
    runtime="t5x-tpu-v4",
    weights=("bfloat16",),
    kinds=("none", "draft"),
    pairs=_pairs("t5-xxl", "t5-small", "t5-base", "t5-large"),
)
COVERAGE: dict[str, Coverage] = {
    _CPU_GPT: _cpu("cpu-epyc-2vcpu", None, _GPT),
    _CPU_LLAMA: _cpu("cpu-epyc-2vcpu", None, _LLAMA),
    **{
        _ROWS.format(pair=name, joint=j): _cpu("cpu-xeon-2vcpu", rt, pairs)
        for name, pairs in (
            ("gpt-like-97m + gpt-like-6m", _GPT),
            ("llama-160m + llama-68m", _LLAMA),
        )
        for j, rt in (("", "cpu-xeon-eager-rows-fp32"), (_JOINT, "cpu-xeon-eager-rows"))
    },
    "Leviathan Table 2, EnDe rows (full model, fitted on CNNDM)": _TPU,
    "Leviathan Table 2, CNNDM rows (full model, fitted on EnDe)": _TPU,
    "vLLM v0.19.1 on H100 (vllm-h100 profile)": _plain(
        "h100-sxm", "vllm-h100", ("bfloat16",), "llama-3.1-8b"
    ),
    "vLLM v0.19.1 on H100 (vllm-v1 stack)": _plain(
        "h100-sxm", "vllm-v1", ("bfloat16",), "llama-3.1-8b"
    ),
    "llama.cpp PR #17505: llama.cpp stack on rtx-3090": _plain(
        "rtx-3090", "llama.cpp", ("q4_0",), "llama-3.1-8b"
    ),
    "llama.cpp PR #17505: llama.cpp stack on rtx-4090": _plain(
        "rtx-4090", "llama.cpp", ("q4_0",), "llama-3.1-8b"
    ),
    # The fixed host costs on published plain decode steps (specsim.validate.fidelity.fixed):
    # a committed fit's leave-one-source-out family, or the shipped stack's where it was not.
    _LOSO.format(stack="gpt-fast-stack"): _plain(
        "a100-80gb",
        "gpt-fast-stack",
        ("bfloat16", "int8", "int4"),
        "llama-2-7b",
        "llama-2-70b",
        "llama-3.1-8b",
        "llama-3.1-70b",
        "mixtral-8x7b",
    ),
    _LOSO.format(stack="research-cuda-graphs"): _plain(
        "a100-80gb", "research-cuda-graphs", ("bfloat16",), "llama-2-7b", "llama-2-13b"
    ),
    _KEPT.format(stack="tensorrt-llm"): _plain(
        "b200", "tensorrt-llm", ("bfloat16",), "deepseek-v3"
    ),
    _KEPT.format(stack="sglang"): _plain("h100-sxm", "sglang", ("bfloat16",), "llama-3.1-8b"),
    _KEPT.format(stack="vllm-v0"): _plain("h100-sxm", "vllm-v0", ("bfloat16",), "llama-3.1-8b"),
    _KEPT.format(stack="llama.cpp"): _plain(
        ("rtx-3090", "rtx-4090"), "llama.cpp", ("q4_0",), "llama-2-7b"
    ),
    # The kernel sweeps (specsim.validate.fidelity.kernels) check kernels, not a model pair's
    # deployment, and are not in the fidelity table: they cover none.
}
"""Which deployments and model pairs each family covers; every family not named here covers
none. The weights are those of the runs checked (all float32 on the CPUs; the joint CPU
profile was fitted on int8 and int4 passes too, but no int8 or int4 speculative run is
checked)."""
