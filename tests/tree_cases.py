"""The tree-serving tests' shared set-up: one rank table, the cards and a draft model.

``ACC`` is an illustrative rank table (not a measurement): the tests check the
simulators against closed forms and each other, whatever the numbers are.
"""

from __future__ import annotations

from specsim.cards import load_hardware, load_model
from specsim.proposers import DraftModel, RankAcceptance

Z = 4.5  # the |z| a simulated mean may reach against its closed form
ACC = RankAcceptance(accept=((0.75, 0.35, 0.2), (0.7, 0.3, 0.15), (0.65, 0.3)))
TARGET, HW = load_model("llama-2-7b"), load_hardware("a100-80gb")
DRAFT = DraftModel(card=load_model("llama-68m"), acceptance=ACC)
