"""The stored closed forms are exactly sympy's rendering of specsim.theory.symbolic.closed_forms."""

from __future__ import annotations

from specsim import theory
from specsim.theory.symbolic import closed_forms, latex


def test_stored_forms_equal_sympys_rendering() -> None:
    rendered = {name: (str(expr), latex(expr)) for name, expr in closed_forms().items()}
    stored = {name: (form.text, form.latex) for name, form in theory.CLOSED_FORMS.items()}
    stale = {name: pair for name, pair in rendered.items() if stored.get(name) != pair}
    assert not stale and stored.keys() == rendered.keys(), (
        "specsim/theory/forms.py is stale; the entries sympy gives now (text, latex):\n"
        + "\n".join(f"{name}: {pair!r}" for name, pair in stale.items())
    )
