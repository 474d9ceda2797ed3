"""The peer's side of bench_peer.py: a continuous-batching loop on aiconfigurator's estimator.

Runs in the peer's own virtual environment (numpy and aiconfigurator only; it
never imports specsim). Reads the workload that bench_peer.py wrote (arrivals,
lengths, and each request's acceptance run lengths, drawn by specsim from the
same seed as the specsim run it is compared with), serves it with the same
rules as specsim's serving engine (first come first served, at most
``max_batch`` sequences, KV reserved up front, the admitted prompts prefilled
in one pass that yields their first tokens; each iteration every running
sequence drafts ``gamma`` tokens and emits its accepted run plus one, cut at
its end), and asks the peer's per-step estimator for every pass: one prefill
call for the admitted prompts (two when drafting), ``gamma`` draft steps and
one verification step (``gamma + 1`` query tokens a sequence) per iteration.
Only the estimator calls are the peer's; nothing is fitted to its database.

Usage: python _peer_loop.py WORKLOAD.npz TARGET_DIR DRAFT_DIR REPEATS > result.json
Prints one JSON object: the CPU seconds of each timed run, speculative and
plain, after a first run of each (the estimator loads its tables lazily on
first use; that run's time is reported apart), and the iterations each took.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from aiconfigurator_core.sdk.engine import EngineHandle

SYSTEM, BACKEND = "a100_sxm", "trtllm"  # the fastest of the peer's backends on this system


def serve(w: dict[str, np.ndarray], target: EngineHandle, draft: EngineHandle, gamma: int) -> int:
    """One serving run; returns the number of batch iterations."""
    arrival, prompt, out_len = w["arrival_s"], w["prompt_tokens"], w["output_tokens"]
    base, run1 = w["base"], w["run_flat"] + 1
    reserve = prompt + out_len + int(w["max_gamma"]) + 1
    capacity, max_batch = int(w["capacity"]), int(w["max_batch"])
    n = arrival.shape[0]
    nxt = 0  # next request to arrive
    waiting: list[int] = []
    rid = ptr = end = off = np.zeros(0, dtype=np.int64)
    now, used, done, iters, ctx_sum = 0.0, 0, 0, 0, 0
    while done < n:
        if not waiting and rid.shape[0] == 0 and arrival[nxt] > now:
            now = float(arrival[nxt])
        while nxt < n and arrival[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        adm: list[int] = []
        while (
            waiting
            and rid.shape[0] + len(adm) < max_batch
            and used + reserve[waiting[0]] <= capacity
        ):
            i = waiting.pop(0)
            adm.append(i)
            used += int(reserve[i])
        step_ms = 0.0
        if adm:
            a = np.asarray(adm, dtype=np.int64)
            isl = int(prompt[a].mean())
            step_ms += target.predict_prefill_latency(len(adm), isl)
            if gamma:
                step_ms += draft.predict_prefill_latency(len(adm), isl)
            one = out_len[a] == 1  # the prefill's token is their only one: done
            done += int(one.sum())
            used -= int(reserve[a[one]].sum())
            a = a[~one]
            rid = np.concatenate([rid, a])
            ptr = np.concatenate([ptr, base[a] + 1])
            end = np.concatenate([end, base[a] + out_len[a]])
            off = np.concatenate([off, prompt[a] - base[a]])
            ctx_sum += int(prompt[a].sum()) + a.shape[0]
        b = rid.shape[0]
        iters += 1
        if b == 0:  # nothing to decode yet (every admitted request was a one-token one)
            now += step_ms / 1e3
            continue
        ctx = ctx_sum // b  # the peer's step takes one context: the batch's mean
        for j in range(gamma):
            step_ms += draft.decode_step_latency(b, ctx + j, 1)
        step_ms += target.decode_step_latency(b * (gamma + 1), ctx, 1)
        acc = np.minimum(np.minimum(run1[ptr], gamma + 1), end - ptr)
        ptr += acc
        ctx_sum += int(acc.sum())
        now += step_ms / 1e3
        fin = ptr >= end
        if fin.any():
            used -= int(reserve[rid[fin]].sum())
            done += int(fin.sum())
            ctx_sum -= int((off[fin] + end[fin]).sum())
            keep = ~fin
            rid, ptr, end, off = rid[keep], ptr[keep], end[keep], off[keep]
    return iters


def main() -> None:
    path, target_dir, draft_dir, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    w = dict(np.load(path))
    target = EngineHandle.compile(target_dir, SYSTEM, BACKEND)
    draft = EngineHandle.compile(draft_dir, SYSTEM, BACKEND)
    gamma = int(w["gamma"])
    out: dict[str, list[float] | float | int] = {}
    for name, g in (("spec", gamma), ("plain", 0)):
        t = time.process_time()
        out[f"{name}_iterations"] = serve(w, target, draft, g)  # the first run: warm-up
        out[f"{name}_first_cpu_s"] = time.process_time() - t
        times = []
        for _ in range(repeats):
            t = time.process_time()
            serve(w, target, draft, g)
            times.append(time.process_time() - t)
        out[f"{name}_cpu_s"] = times
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
