"""The verdict for one deployment and load: should speculation be on, with which proposer,
what k or tree, and what it gains (``specsim plan``; docs/plan.md).

:func:`plan` answers a :class:`PlanRequest` (:mod:`specsim.plan.options`) from the layers
below: the tree optimizer picks each option's tree, the serving engine serves the load
(:mod:`specsim.plan.evaluation`), closed forms say where each option stops paying and what
would change the answer (:mod:`specsim.plan.limits`), an option given no acceptance gets
its break-even acceptance instead (:mod:`specsim.plan.breakeven`), :mod:`specsim.plan.verdict`
picks from the table and says it in one sentence, and :mod:`specsim.plan.render` prints it.
"""

from specsim.plan.answer import PlanAnswer, plan
from specsim.plan.breakeven import BreakEven, Published
from specsim.plan.evaluation import Estimate, Row
from specsim.plan.options import KINDS, Load, Option, OptionSpec, PlanRequest
from specsim.plan.plan_toml import request_from_toml
from specsim.plan.render import html_section, options_table, render_html, render_text
from specsim.plan.verdict import Verdict, choose

__all__ = [
    "KINDS",
    "BreakEven",
    "Estimate",
    "Load",
    "Option",
    "OptionSpec",
    "PlanAnswer",
    "PlanRequest",
    "Published",
    "Row",
    "Verdict",
    "choose",
    "html_section",
    "options_table",
    "plan",
    "render_html",
    "render_text",
    "request_from_toml",
]
