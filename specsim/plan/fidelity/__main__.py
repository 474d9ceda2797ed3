"""``python -m specsim.plan.fidelity [PATH]``: recompute the fidelity summary the plan reads and
write it (default: :data:`specsim.plan.fidelity.SUMMARY_FILE`). A ``__main__`` module of its
own, so that running the package does not import it twice (runpy's warning)."""

from __future__ import annotations

import sys
from pathlib import Path

from specsim.plan.fidelity import SUMMARY_FILE, write_summary


def main(argv: list[str] | None = None) -> int:
    """Write the summary to ``argv[0]`` (default :data:`SUMMARY_FILE`) and print it."""
    args = sys.argv[1:] if argv is None else argv
    out = write_summary(Path(args[0]) if args else SUMMARY_FILE)
    sys.stdout.write(out.to_string() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
