r"""The closed forms as text and LaTeX, printable without sympy.

start-up: importing sympy costs about a second of CPU, ten times what the numbers
cost, so ``specsim theory`` prints the published forms from this table rather
than from :func:`specsim.theory.symbolic.closed_forms`. The table is sympy's own
rendering of those expressions (``str`` and
:func:`specsim.theory.symbolic.latex`); ``tests/theory/test_theory_forms.py`` rebuilds it
with sympy and fails, showing the new entries, when the two differ.

>>> print(CLOSED_FORMS["expected_tokens"].text)
(1 - alpha**(gamma + 1))/(1 - alpha)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["ClosedForm", "CLOSED_FORMS"]


@dataclass(frozen=True, kw_only=True)
class ClosedForm:
    """One closed form as sympy prints it: ``text`` (``str(expr)``) and ``latex``."""

    text: str
    latex: str


CLOSED_FORMS: Mapping[str, ClosedForm] = MappingProxyType(
    {
        "tokens_pmf": ClosedForm(
            text=(
                "Piecewise((alpha**(k - 1)*(1 - alpha), (gamma >= k) & (k >= 1)), "
                "(alpha**gamma, Eq(k, gamma + 1)), (0, True))"
            ),
            latex=(
                r"\begin{cases} \alpha^{k - 1} \left(1 - \alpha\right) & \text{for}\: "
                r"\gamma \geq k \wedge k \geq 1 \\\alpha^{\gamma} & \text{for}\: k = "
                r"\gamma + 1 \\0 & \text{otherwise} \end{cases}"
            ),
        ),
        "expected_tokens": ClosedForm(
            text="(1 - alpha**(gamma + 1))/(1 - alpha)",
            latex=r"\frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}",
        ),
        "tokens_variance": ClosedForm(
            text=(
                "(alpha - alpha**(gamma + 1)*(1 - alpha)*(2*gamma + 1) - alpha**(2*gamma "
                "+ 2))/(1 - alpha)**2"
            ),
            latex=(
                r"\frac{\alpha - \alpha^{\gamma + 1} \left(1 - \alpha\right) \left(2 "
                r"\gamma + 1\right) - \alpha^{2 \gamma + 2}}{\left(1 - \alpha\right)^{2}}"
            ),
        ),
        "walltime_speedup": ClosedForm(
            text="(1 - alpha**(gamma + 1))/((1 - alpha)*(c*gamma + v))",
            latex=(
                r"\frac{1 - \alpha^{\gamma + 1}}{\left(1 - \alpha\right) \left(c \gamma + "
                r"v\right)}"
            ),
        ),
        "ops_factor": ClosedForm(
            text="(1 - alpha)*(c_hat*gamma + gamma + 1)/(1 - alpha**(gamma + 1))",
            latex=(
                r"\frac{\left(1 - \alpha\right) \left(\hat{c} \gamma + \gamma + "
                r"1\right)}{1 - \alpha^{\gamma + 1}}"
            ),
        ),
        "target_calls_per_token": ClosedForm(
            text="(1 - alpha)/(1 - alpha**(gamma + 1))",
            latex=r"\frac{1 - \alpha}{1 - \alpha^{\gamma + 1}}",
        ),
        "draft_calls_per_token": ClosedForm(
            text="gamma*(1 - alpha)/(1 - alpha**(gamma + 1))",
            latex=r"\frac{\gamma \left(1 - \alpha\right)}{1 - \alpha^{\gamma + 1}}",
        ),
        "oracle_speedup_bound": ClosedForm(
            text="1/(1 - alpha)",
            latex=r"\frac{1}{1 - \alpha}",
        ),
        "gamma1_lower_bound": ClosedForm(
            text="(alpha + 1)/(c + 1)",
            latex=r"\frac{\alpha + 1}{c + 1}",
        ),
        "optimal_gamma": ClosedForm(
            text="alpha**(gamma + 1)*(c*gamma + 1) - c*(1 - alpha**(gamma + 1))/(1 - alpha)",
            latex=(
                r"\alpha^{\gamma + 1} \left(c \gamma + 1\right) - \frac{c \left(1 - "
                r"\alpha^{\gamma + 1}\right)}{1 - \alpha}"
            ),
        ),
    }
)
"""Every entry of :func:`specsim.theory.symbolic.closed_forms`, by name, as text and LaTeX."""
