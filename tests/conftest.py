"""Shared fixtures and the Hypothesis profiles.

Two Hypothesis profiles (README, "Development"):

- ``ci`` (the default, and always when the ``CI`` environment variable is set):
  derandomized, no example database, a fixed number of examples, so every run of
  the suite draws the same examples and gives the same result;
- ``explore``: random, many more examples, failures kept in ``.hypothesis/`` and
  replayed first next time. Choose it with ``HYPOTHESIS_PROFILE=explore`` or
  ``pytest --hypothesis-profile=explore``.
"""

import os

import numpy as np
import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

settings.register_profile(
    "ci", derandomize=True, database=None, print_blob=True, deadline=None, max_examples=100
)
settings.register_profile(
    "explore",
    derandomize=False,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
    print_blob=True,
    deadline=None,
    max_examples=2000,
)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20231129)
