"""How often one ``specsim plan`` question resolves weight formats and builds deployments.

Run: .venv/bin/python benchmarks/count_resolves.py [PLAN FLAGS ...]
(default: the README's first plan question). Every binding of
:func:`specsim.cost.formats.resolve_formats` in the loaded modules is wrapped by a counter
before the command runs (modules imported later bind the wrapped one), and so is
``Deployment.__post_init__``; the plan's own output is discarded. Issue 32 counted 2,637
resolutions and 396 deployments for about ten distinct deployments before a resolved
deployment was remembered (``Deployment.resolved``).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import specsim.cost.formats as formats_module
from specsim.cli import main as cli_main
from specsim.cost.deployment import Deployment

DEFAULT = [
    "plan",
    "--model",
    "vicuna-7b-v1.3",
    "--hardware",
    "h100-sxm",
    "--runtime",
    "vllm-h100",
    "--heads",
    "eagle-vicuna-7b-v1.3",
    "--heads",
    "medusa-vicuna-7b-v1.3",
    "--ngram",
    "--rate",
    "4",
]


def _counted(fn: Callable[..., Any], counts: Counter[str], key: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        counts[key] += 1
        return fn(*args, **kwargs)

    return wrapper


def count(argv: list[str]) -> Counter[str]:
    """Run ``specsim`` with ``argv`` and count the resolutions and deployments it makes."""
    counts: Counter[str] = Counter()
    original = formats_module.resolve_formats
    wrapped = _counted(original, counts, "resolve_formats")
    for module in list(sys.modules.values()):
        if getattr(module, "resolve_formats", None) is original:
            module.resolve_formats = wrapped  # type: ignore[attr-defined]
    post_init = Deployment.__post_init__
    Deployment.__post_init__ = _counted(post_init, counts, "deployments")  # type: ignore[method-assign]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            cli_main(argv)
    finally:
        Deployment.__post_init__ = post_init  # type: ignore[method-assign]
        for module in list(sys.modules.values()):
            if getattr(module, "resolve_formats", None) is wrapped:
                module.resolve_formats = original  # type: ignore[attr-defined]
    return counts


def main() -> None:
    argv = sys.argv[1:] or DEFAULT
    counts = count(argv)
    print(f"specsim {' '.join(argv)}")
    print(f"resolve_formats calls: {counts['resolve_formats']}")
    print(f"Deployments built: {counts['deployments']}")


if __name__ == "__main__":
    main()
