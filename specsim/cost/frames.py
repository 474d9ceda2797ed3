"""Tidy tables of the derived quantities, over grids of batch, context and gamma.

Each ``*_frame`` function evaluates a grid of passes on a deployment
(:func:`specsim.cost.grid.pass_grid`) in one vectorised call, with the conventions of
:func:`specsim.cost.verification_factor` and :func:`specsim.cost.cost_coefficient`, and
returns a pandas DataFrame with one row per configuration, ready for
:mod:`specsim.plots.figures` or a study. Configurations whose weights and KV cache do not
fit on the accelerator are left out (and counted in ``df.attrs``).

>>> dep = Deployment(target="llama-2-7b", hardware="a100-80gb")
>>> df = verification_frame(dep, gammas=(3,), batches=(1, 256), context=128)
>>> df[["gamma", "batch", "tokens"]].values.tolist()
[[3, 1, 4], [3, 256, 1024]]
>>> df.v.round(2).tolist(), df.bound.tolist()
([1.0, 2.92], ['memory', 'compute'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from specsim.cards import ModelCard
from specsim.cost.deployment import Deployment
from specsim.cost.derived import draft_on, ops_coefficient
from specsim.cost.flops import ridge_tokens
from specsim.cost.grid import pass_grid
from specsim.cost.model import DEFAULT_CONTEXT
from specsim.cost.shape import verification_positions

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DEFAULT_BATCHES", "verification_frame", "cost_coefficient_frame"]

DEFAULT_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""Batch sizes swept when none are given (powers of two)."""


def verification_frame(
    deployment: Deployment,
    *,
    gammas: Sequence[int] = (1, 3, 7),
    batches: Sequence[int] = DEFAULT_BATCHES,
    context: int = DEFAULT_CONTEXT,
    encoder_length: int | None = None,
) -> pd.DataFrame:
    """v(gamma) = time(gamma + 1 new tokens) / time(1 new token) over gamma x batch, of the
    target's passes on ``deployment`` (its hardware, stack, formats and parallelism).

    Columns: model, hardware, dtype, context, tensor_parallel, gamma, batch,
    tokens (``batch * (gamma + 1)``, the tokens of the verification pass), v,
    bound (of the verification pass), time_1_s, time_v_s, ridge_tokens
    (:func:`specsim.cost.flops.ridge_tokens`, the same on every row).
    """
    import pandas as pd  # start-up: keeps import specsim.cost free of pandas

    if not isinstance(deployment, Deployment):
        raise TypeError(f"deployment: expected a Deployment, got {type(deployment).__name__}")
    model, hardware = deployment.target, deployment.hardware
    g = np.asarray(gammas, dtype=np.int64).reshape(-1, 1)
    b = np.asarray(batches, dtype=np.int64).reshape(1, -1)
    kw: dict[str, Any] = {"batch": b, "context": context, "encoder_length": encoder_length}
    if g.size == 0 or b.size == 0:
        raise ValueError(f"gammas and batches must be non-empty, got {gammas!r}, {batches!r}")
    kw["check_memory"] = False  # elements that do not fit are dropped (attrs say how many)
    pos = verification_positions(g)
    verify = pass_grid(deployment, new_tokens=pos, verify=True, **kw)  # as v(gamma) prices it
    single = pass_grid(deployment, new_tokens=1, **kw)
    gg, bb = np.broadcast_arrays(g, b)
    df = pd.DataFrame(
        {
            "model": model.slug,
            "hardware": hardware.slug,
            "dtype": verify.dtype,
            "context": int(context),
            "tensor_parallel": int(deployment.tensor_parallel),
            "gamma": gg.ravel(),
            "batch": bb.ravel(),
            "tokens": (bb * verification_positions(gg)).ravel(),
            "v": (verify.time_s / np.broadcast_to(single.time_s, verify.time_s.shape)).ravel(),
            "bound": verify.bound.ravel(),
            "time_1_s": np.broadcast_to(single.time_s, verify.time_s.shape).ravel(),
            "time_v_s": verify.time_s.ravel(),
            "ridge_tokens": ridge_tokens(hardware, verify.dtype, runtime=deployment.runtime),
        }
    )
    keep = verify.fits.ravel()
    out = df[keep].reset_index(drop=True)
    out.attrs["dropped_not_fitting"] = int((~keep).sum())
    return out


def cost_coefficient_frame(
    drafts: Sequence[ModelCard],
    deployment: Deployment,
    *,
    batches: Sequence[int] = (1, 4, 16, 64),
    contexts: Sequence[int] = (128, 512, 2048),
    draft_devices: Deployment | None = None,
    encoder_length: int | None = None,
) -> pd.DataFrame:
    """c(draft, target) over drafts x batch x context, with c-hat and the parameter ratio.

    The target runs on ``deployment``; each draft on one device of ``draft_devices``'s
    hardware with its stack when given (a device of their own), else of ``deployment``'s
    (:func:`specsim.cost.derived.draft_on`, as :func:`specsim.cost.cost_coefficient`), its
    step under the stack's drafting profile.
    Columns: draft, target, hardware, draft_hardware, batch, context, c (time ratio of one
    step each), c_hat (flops-per-token ratio, :func:`specsim.cost.derived.ops_coefficient`),
    param_ratio (stated parameters, draft / target), draft_time_s, target_time_s.
    """
    import pandas as pd  # start-up: keeps import specsim.cost free of pandas

    if not isinstance(deployment, Deployment):
        raise TypeError(f"deployment: expected a Deployment, got {type(deployment).__name__}")
    target, hardware = deployment.target, deployment.hardware
    on = deployment if draft_devices is None else draft_devices
    b = np.asarray(batches, dtype=np.int64).reshape(-1, 1)
    c = np.asarray(contexts, dtype=np.int64).reshape(1, -1)
    if b.size == 0 or c.size == 0 or not drafts:
        raise ValueError("drafts, batches and contexts must be non-empty")
    bb, cc = np.broadcast_arrays(b, c)
    kw: dict[str, Any] = {"batch": b, "context": c, "new_tokens": 1}
    kw |= {"encoder_length": encoder_length, "check_memory": False}
    t_target = pass_grid(deployment, **kw)
    frames = []
    for draft in drafts:
        d_dep = draft_on(on, draft)
        t_draft = pass_grid(d_dep.drafting(), **kw)  # a draft step: the drafting profile, as c
        c_hat = np.broadcast_to(
            ops_coefficient(draft, target, context=c, encoder_length=encoder_length), bb.shape
        )
        df = pd.DataFrame(
            {
                "draft": draft.slug,
                "target": target.slug,
                "hardware": hardware.slug,
                "draft_hardware": d_dep.hardware.slug,
                "batch": bb.ravel(),
                "context": cc.ravel(),
                "c": (t_draft.time_s / t_target.time_s).ravel(),
                "c_hat": np.asarray(c_hat).ravel(),
                "param_ratio": draft.params / target.params,
                "draft_time_s": t_draft.time_s.ravel(),
                "target_time_s": t_target.time_s.ravel(),
            }
        )
        frames.append(df[(t_draft.fits & t_target.fits).ravel()])
    out = pd.concat(frames, ignore_index=True)
    out.attrs["dropped_not_fitting"] = len(drafts) * bb.size - len(out)
    return out
