"""Model and accelerator cards: frozen dataclasses read from TOML files.

A *card* is data. A language-model card (:class:`ModelCard`) gives a model's
shape (layers, widths, heads, vocabulary), its stated parameter count and its
default dtype; an accelerator card (:class:`HardwareCard`) gives peak dense
FLOP/s per dtype, memory bandwidth and capacity, interconnect, power, and the
efficiency and overhead parameters of the cost model (:mod:`specsim.cost`).
Every number in a card file carries its source in a comment or in the card's
``sources`` table; ``models/README.md`` describes the schema and units.

Cards are found, in this order, in: a path given directly (``*.toml``);
folders passed as ``search_path``; folders listed in the environment variable
``SPECSIM_CARDS`` (separated by ``os.pathsep``); the cards shipped with the
package (``specsim/_models`` in a wheel, the top-level ``models/`` folder in a
checkout). Within a card folder, language models live in ``lm/``, accelerators
in ``hardware/`` and calibrated accelerators (written by the calibration
engine) in ``calibrated/``; a user folder may also hold cards directly. A card
is looked up by its file name, so a card file must be named after its slug;
a user's card stands in for a shipped card of the same slug, but one slug
found twice among the user folders (or among the shipped cards) is an error
naming both files, as is a file named for another card.

The package: :mod:`~specsim.cards.model` (:class:`ModelCard`),
:mod:`~specsim.cards.hardware` (:class:`HardwareCard`), :mod:`~specsim.cards.files`
(finding, reading and writing card files: the only TOML reader of specsim),
:mod:`~specsim.cards.runtime` (:class:`RuntimeProfile`, a software stack's numbers, under
``runtime/``) and
:mod:`~specsim.cards.checks` (field checks shared by the cards).

>>> card = load_model("llama-2-7b")
>>> card.layers, card.kv_heads, round(card.shape_params / 1e9, 2)
(32, 32, 6.74)
"""

from specsim.cards.checks import DTYPE_BYTES
from specsim.cards.files import (
    ENV_VAR,
    SearchPath,
    card_dirs,
    list_hardware,
    list_models,
    list_runtimes,
    load_hardware,
    load_model,
    load_runtime,
    read_toml,
    searched_first,
)
from specsim.cards.hardware import (
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_LAYER_OVERHEAD_S,
    DEFAULT_MEMORY_EFFICIENCY,
    DEFAULT_PASS_OVERHEAD_S,
    HardwareCard,
)
from specsim.cards.heads import HeadCard, list_heads, load_head
from specsim.cards.model import ModelCard
from specsim.cards.proposer_cards import (
    PROPOSER_KINDS,
    ParallelDraftCard,
    ProposerCard,
    SelfSpecCard,
    StreamingSelfSpecCard,
    list_proposer_cards,
    load_proposer_card,
)
from specsim.cards.runtime import RuntimeProfile, check_runtime_device, profile_of_card
from specsim.cards.stack import DevicePart, StackProfile
from specsim.cards.stack_files import compose, is_stack, list_stacks, load_stack
from specsim.cards.writing import write_card, write_hardware_card

__all__ = [
    "PROPOSER_KINDS",
    "ParallelDraftCard",
    "ProposerCard",
    "SelfSpecCard",
    "StreamingSelfSpecCard",
    "list_proposer_cards",
    "load_proposer_card",
    "DTYPE_BYTES",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_MEMORY_EFFICIENCY",
    "DEFAULT_LAYER_OVERHEAD_S",
    "DEFAULT_PASS_OVERHEAD_S",
    "ENV_VAR",
    "SearchPath",
    "ModelCard",
    "HardwareCard",
    "card_dirs",
    "searched_first",
    "load_model",
    "load_hardware",
    "read_toml",
    "write_card",
    "write_hardware_card",
    "list_models",
    "list_hardware",
    "RuntimeProfile",
    "load_runtime",
    "list_runtimes",
    "profile_of_card",
    "check_runtime_device",
    "StackProfile",
    "DevicePart",
    "compose",
    "is_stack",
    "list_stacks",
    "load_stack",
    "HeadCard",
    "load_head",
    "list_heads",
]
