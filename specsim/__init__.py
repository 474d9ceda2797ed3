"""specsim: model speculative decoding of large language models.

Exact speculative sampling (:mod:`specsim.sampling`), the closed forms derived
symbolically (:mod:`specsim.theory`), a roofline cost model of accelerators
(:mod:`specsim.cost`, :mod:`specsim.cards`) and a discrete-event simulator of
accelerator timelines (:mod:`specsim.sim`).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
