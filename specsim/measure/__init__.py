"""Measure real transformer passes and real speculative decoding (needs torch, transformers).

The optional extra ``specsim[measure]`` provides torch and transformers; this
package is the only part of specsim that imports them (``import specsim``
never does). It builds models of the cards' shapes with random weights
(:mod:`~specsim.measure.models`), times forward passes and the device's
ceilings (:mod:`~specsim.measure.timing`), runs autoregressive and
speculative decoding with exact verification and KV-cache rollback
(:mod:`~specsim.measure.decode`) beside Hugging Face's assisted generation
(:mod:`~specsim.measure.assisted`), and runs presets into traces of the
documented schema (:mod:`~specsim.measure.presets`,
:mod:`~specsim.measure.run`, :mod:`specsim.traces.io`, ``docs/traces.md``).

Real acceptance (``docs/real-acceptance.md``): corpora from installed
packages (:mod:`~specsim.measure.corpus`), the shared tokenizer and tiny
models (:mod:`~specsim.measure.tinylm`), their training
(:mod:`~specsim.measure.train`, :mod:`~specsim.measure.realbuild`), and
alpha, signals and real speculative decoding on them
(:mod:`~specsim.measure.realalpha`, :mod:`~specsim.measure.realrun`,
:mod:`~specsim.measure.realspec`).
"""

try:
    import tokenizers as _tokenizers  # noqa: F401
    import torch as _torch  # noqa: F401
    import transformers as _transformers  # noqa: F401
except ImportError as exc:  # the extra is missing: say which one, not just the module
    raise ImportError(
        "specsim.measure needs the optional extra specsim[measure] (torch, transformers, "
        f"tokenizers, safetensors): pip install 'specsim[measure]' ({exc})"
    ) from exc

from specsim.measure.assisted import SCHEDULES, hf_generate
from specsim.measure.corpus import MissingPackageError, build_corpora
from specsim.measure.decode import (
    Decoded,
    DecodeState,
    SpecDecoded,
    autoregressive_decode,
    next_token_probs,
    sample_rows,
    speculative_decode,
)
from specsim.measure.interleave import Interleaved, interleaved_decode
from specsim.measure.models import (
    DTYPES,
    build_model,
    hf_config,
    int4_supported,
    quantize_weights,
    resolve_device,
    torch_dtype,
)
from specsim.measure.presets import PRESETS, Preset, get_preset, shrink
from specsim.measure.realalpha import measure_alpha, position_stats, summarize
from specsim.measure.realbuild import build_real
from specsim.measure.realrun import measure_real
from specsim.measure.run import SECTIONS, device_name, run_preset, unit_rng
from specsim.measure.timing import (
    energy_meter,
    filled_state,
    interleaved_until,
    measure_allreduce,
    measure_ceilings,
    time_calls,
    time_passes,
)
from specsim.measure.tinylm import TinySpec, load_tiny, save_tiny
from specsim.measure.train import PLAN, TrainConfig
from specsim.measure.trainloop import train_model

__all__ = [
    "SCHEDULES",
    "hf_generate",
    "DecodeState",
    "Decoded",
    "SpecDecoded",
    "autoregressive_decode",
    "next_token_probs",
    "sample_rows",
    "speculative_decode",
    "Interleaved",
    "interleaved_decode",
    "DTYPES",
    "build_model",
    "hf_config",
    "resolve_device",
    "torch_dtype",
    "int4_supported",
    "quantize_weights",
    "PRESETS",
    "Preset",
    "get_preset",
    "shrink",
    "SECTIONS",
    "device_name",
    "run_preset",
    "unit_rng",
    "energy_meter",
    "filled_state",
    "interleaved_until",
    "measure_allreduce",
    "measure_ceilings",
    "time_calls",
    "time_passes",
    "MissingPackageError",
    "build_corpora",
    "position_stats",
    "summarize",
    "build_real",
    "measure_alpha",
    "measure_real",
    "TinySpec",
    "load_tiny",
    "save_tiny",
    "PLAN",
    "TrainConfig",
    "train_model",
]
