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
:mod:`~specsim.measure.run`, :mod:`specsim.traces`, ``docs/traces.md``).
"""

from specsim.measure.assisted import SCHEDULES, hf_generate
from specsim.measure.decode import (
    Decoded,
    DecodeState,
    SpecDecoded,
    autoregressive_decode,
    next_token_probs,
    sample_rows,
    speculative_decode,
)
from specsim.measure.models import DTYPES, build_model, hf_config, resolve_device, torch_dtype
from specsim.measure.presets import PRESETS, Preset, get_preset
from specsim.measure.run import SECTIONS, device_name, run_preset, unit_rng
from specsim.measure.timing import (
    energy_meter,
    filled_state,
    measure_ceilings,
    time_calls,
    time_passes,
)

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
    "DTYPES",
    "build_model",
    "hf_config",
    "resolve_device",
    "torch_dtype",
    "PRESETS",
    "Preset",
    "get_preset",
    "SECTIONS",
    "device_name",
    "run_preset",
    "unit_rng",
    "energy_meter",
    "filled_state",
    "measure_ceilings",
    "time_calls",
    "time_passes",
]
