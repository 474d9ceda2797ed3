"""specsim's serving simulator against a peer's per-step cost model, per simulated request.

Run: .venv/bin/python benchmarks/bench_peer.py [--rounds N]

The workload (issue 12): Llama-2-7B verifying for Llama-68M on one A100-80GB,
600 Poisson requests at 200 per second (more than the accelerator serves, so
the batch stays near its limit), prompt 256, output 1024, at most 64
sequences a batch, i.i.d. acceptance alpha = 0.7, gamma = 4, seed 0.

The peer: aiconfigurator 0.12.0 (NVIDIA; its per-step estimator lives in
aiconfigurator-core 0.12.0), installed on first use into its own virtual
environment, ``.venv-peer`` at the repository root (or ``$SPECSIM_PEER_VENV``);
when that fails the benchmark says why and stops. ``_peer_loop.py`` drives its estimator with
the batching loop specsim's engine runs (same admission, same acceptance run
lengths, so the same iterations; one estimator call per pass) without simpy.
Only the time of its calls is used: nothing is fitted to its performance
database. Its tables have no attention data at head size 64, so its draft is
Llama-68M reshaped to heads of 128 (same width, depth and MLP); pass counts
and shapes are otherwise the same as specsim's.

Both sides: a first run (the peer loads its tables lazily; specsim builds its
card constants), reported apart, then CPU time (time.process_time) of whole
runs, best over rounds that alternate the two so that both see the same
machine load. specsim's figure is a whole ``simulate_serving`` call: the workload and
acceptance draws, the run, its tables, and the plain twin when asked for.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import machine, table  # noqa: E402

from specsim.acceptance.processes import IIDAcceptance  # noqa: E402
from specsim.cards import ModelCard, load_hardware, load_model  # noqa: E402
from specsim.cost import Deployment  # noqa: E402
from specsim.policies.lookahead import FixedGamma  # noqa: E402
from specsim.sim import CardCost, PoissonWorkload, ServingConfig, simulate_serving  # noqa: E402
from specsim.sim.serving.batch import Requests, draw_requests  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Its own virtual environment: .venv-peer at the repository root (git ignores it), or
# wherever SPECSIM_PEER_VENV says.
PEER_ENV = Path(os.environ.get("SPECSIM_PEER_VENV", ROOT / ".venv-peer"))
PEER_SPEC = "aiconfigurator==0.12.0"
PEER_HEAD_DIM = 128  # the head size the peer's attention tables cover
SEED, GAMMA = 0, 4


def ensure_peer() -> Path | None:
    """The peer's python, installing it on first use; None (with the reason printed) if not."""
    python = PEER_ENV / "bin" / "python"
    marker = PEER_ENV / ".installed"
    if marker.exists():
        return python
    print(f"installing the peer ({PEER_SPEC}) into {PEER_ENV} ...", file=sys.stderr)
    try:
        venv.create(PEER_ENV, with_pip=True, clear=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", PEER_SPEC], check=True, timeout=1800
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"skipped: the peer could not be installed ({exc})")
        return None
    marker.write_text(PEER_SPEC + "\n")
    return python


def hf_config(card: ModelCard, folder: Path) -> Path:
    """The model as a Hugging Face config.json, from specsim's card, for the peer to read."""
    heads = card.d_model // PEER_HEAD_DIM
    kv_heads = max(1, heads * card.kv_heads // card.heads)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": card.d_model,
        "num_hidden_layers": card.layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": PEER_HEAD_DIM,
        "intermediate_size": card.d_ff,
        "vocab_size": card.vocab,
        "max_position_embeddings": card.max_position,
        "torch_dtype": "float16",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": card.tied_embeddings,
    }
    path = folder / card.slug
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg, indent=1))
    return path


def scenario() -> ServingConfig:
    cost = CardCost(
        deployment=Deployment(target=load_model("llama-2-7b"), hardware=load_hardware("a100-80gb")),
        draft=load_model("llama-68m"),
    )
    work = PoissonWorkload(rate_per_s=200.0, requests=600, prompt_tokens=256, output_tokens=1024)
    return ServingConfig(
        workload=work,
        cost=cost,
        acceptance=IIDAcceptance(alpha=0.7),
        policy=FixedGamma(gamma=GAMMA),
        max_batch=64,
        max_gamma=GAMMA,
    )


def write_workload(cfg: ServingConfig, path: Path) -> None:
    """The requests and acceptance run lengths exactly as simulate_serving draws them."""
    rng = np.random.default_rng(SEED)
    t = cfg.workload.sample(rng)
    draws = draw_requests(
        cfg.acceptance, t["output_tokens"].to_numpy(), max_gamma=cfg.max_gamma, rng=rng
    )
    req = Requests.build(t, draws, max_gamma=cfg.max_gamma)
    np.savez(
        path,
        arrival_s=req.arrival,
        prompt_tokens=req.prompt,
        output_tokens=req.out_len,
        base=req.base,
        run_flat=req.run1 - 1,
        max_gamma=cfg.max_gamma,
        gamma=GAMMA,
        capacity=cfg.kv_capacity() or np.iinfo(np.int64).max,  # None: no limit
        max_batch=cfg.max_batch,
    )


def specsim_cpu(cfg: ServingConfig) -> tuple[float, int]:
    t = time.process_time()
    r = simulate_serving(cfg, np.random.default_rng(SEED))
    return time.process_time() - t, len(r.iterations_spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    python = ensure_peer()
    if python is None:
        return
    cfg = scenario()
    alone = dataclasses.replace(cfg, plain_twin=False)
    n = cfg.workload.requests  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_workload(cfg, folder / "workload.npz")
        models = [str(hf_config(load_model(s), folder)) for s in ("llama-2-7b", "llama-68m")]
        cmd = [
            str(python),
            str(Path(__file__).with_name("_peer_loop.py")),
            str(folder / "workload.npz"),
            *models,
            "1",
        ]
        first = specsim_cpu(cfg)[0]  # warm-up: the first run in this process, reported apart
        peer: dict[str, list[float]] = {"spec": [], "plain": [], "first": []}
        mine: dict[str, list[float]] = {"alone": [], "twin": []}
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        for _ in range(args.rounds):
            done = subprocess.run(cmd, capture_output=True, text=True, env=clean)
            if done.returncode:
                raise SystemExit(f"the peer's loop failed:\n{done.stderr}")
            out = json.loads(done.stdout)
            peer["spec"] += out["spec_cpu_s"]
            peer["plain"] += out["plain_cpu_s"]
            peer["first"].append(out["spec_first_cpu_s"] + out["plain_first_cpu_s"])
            t_alone, iters = specsim_cpu(alone)
            mine["alone"].append(t_alone)
            mine["twin"].append(specsim_cpu(cfg)[0])
    p_spec, p_plain = min(peer["spec"]), min(peer["plain"])
    s_alone, s_twin = min(mine["alone"]), min(mine["twin"])

    def ms(x: float) -> str:
        return f"{x / n * 1e3:.3f}"

    print(f"## Serving speed against a peer ({machine()}; CPU time, best of {args.rounds})\n")
    print(
        table(
            [
                (
                    "batch iterations of the speculative run: specsim / the peer's loop",
                    f"{iters:,} / {out['spec_iterations']:,}",
                ),
                (
                    "batch iterations of the plain twin (the peer's loop)",
                    f"{out['plain_iterations']:,}",
                ),
                ("specsim, the policy's run alone: ms per simulated request", ms(s_alone)),
                ("specsim, the run and its plain twin: ms per simulated request", ms(s_twin)),
                ("peer, the speculative run: ms per simulated request", ms(p_spec)),
                (
                    "peer, the speculative run and a plain run: ms per simulated request",
                    ms(p_spec + p_plain),
                ),
                ("peer / specsim, the run alone (goal >= 10x)", f"{p_spec / s_alone:.1f}x"),
                (
                    "peer / specsim, with the twin (goal >= 10x)",
                    f"{(p_spec + p_plain) / s_twin:.1f}x",
                ),
                (
                    "first runs in a fresh process, with the twin: specsim / peer, ms per request",
                    f"{ms(first)} / {ms(min(peer['first']))}",
                ),
                ("peer / specsim, first runs with the twin", f"{min(peer['first']) / first:.1f}x"),
            ]
        )
    )


if __name__ == "__main__":
    main()
