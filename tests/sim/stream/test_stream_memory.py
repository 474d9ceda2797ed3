"""Issue 13: a single stream runs in memory bounded whatever its length.

`specsim simulate --tokens 100000000` used 9.8 GB. The stream now runs in chunks; each size
runs in a fresh interpreter that reports its peak resident memory (VmHWM). Small chunks
keep the test quick: ten times the tokens must not add more than a few chunks' worth of
memory, while the unchunked run (the control) grows by far more.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="peak memory read from Linux's /proc"
)

CHILD = """
import json, sys
import numpy as np
from specsim.acceptance.processes import IIDAcceptance
from specsim.policies.lookahead import FixedGamma
from specsim.sim import PlainCost, StreamConfig, simulate_stream
from specsim.sim.stream.stream import simulate_stream_metrics

tokens, chunk = int(sys.argv[1]), int(sys.argv[2])
cfg = StreamConfig(tokens=tokens, acceptance=IIDAcceptance(alpha=0.7),
                   policy=FixedGamma(gamma=4), cost=PlainCost(c=0.05), max_gamma=4)
rng = np.random.default_rng(0)
if chunk:
    m = simulate_stream_metrics(cfg, rng, chunk_tokens=chunk)
else:
    m = simulate_stream(cfg, rng).metrics()
# VmHWM, not ru_maxrss: ru_maxrss keeps the parent's peak across fork and exec.
with open("/proc/self/status") as fh:
    hwm = next(line for line in fh if line.startswith("VmHWM:"))
peak_mb = int(hwm.split()[1]) / 1024  # kB
print(json.dumps({"peak_mb": peak_mb, "tokens": m["tokens"]}))
"""


def peak_mb(tokens: int, chunk: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tokens), str(chunk)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    record = json.loads(out.stdout)
    assert tokens <= record["tokens"] <= tokens + 4
    return float(record["peak_mb"])


def test_stream_memory_does_not_grow_with_its_tokens() -> None:
    small, large = 200_000, 2_000_000
    chunk = 1 << 16
    grown = peak_mb(large, chunk) - peak_mb(small, chunk)
    unchunked = peak_mb(large, 0) - peak_mb(small, 0)
    assert unchunked > 100, f"control: the unchunked run grew only {unchunked:.0f} MB"
    assert grown < 25, f"ten times the tokens took {grown:.0f} MB more in chunks"
