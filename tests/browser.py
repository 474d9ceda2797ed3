"""Headless Chromium for the tests that open a page in a real browser: where it is, and
the page's DOM after its scripts ran in a 1400x900 window."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).is_file()), None
)
"""The browser's path, or None (the browser tests are skipped)."""


def dump_dom(page: Path, tmp_path: Path) -> str:
    """The DOM of ``page`` after loading in headless Chromium at 1400x900 (its scripts run
    within 20 s of virtual time); an AssertionError with Chromium's stderr when it fails."""
    if CHROMIUM is None:
        raise RuntimeError("no headless Chromium (apt-get install chromium)")
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,900",
            "--virtual-time-budget=20000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
