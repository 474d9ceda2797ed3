"""The decoding sections of a preset run: plain (autoregressive) runs, speculative runs
(or, with ``interleave``, each timed in turn with its plain twin) and Hugging Face's
assisted generation, each a function of the run's
:class:`~specsim.measure.run_state.RunState`, appending its rows unit by unit."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from specsim.cards import ModelCard, load_model
from specsim.measure.assisted import assisted_runs
from specsim.measure.decode import autoregressive_decode, speculative_decode
from specsim.measure.run_state import RunState, done_keys, unit_rng, with_constants
from specsim.measure.timing import interleaved_until
from specsim.traces import io as traces

__all__ = ["autoregressive", "specdec", "interleaved", "assisted"]


def autoregressive(run: RunState) -> None:
    if run.p.interleave:
        return  # the plain runs are timed in turn with the speculative ones (specdec)
    done = done_keys(run.start("autoregressive"), ("run_id",))
    targets = dict.fromkeys(t for t, _ in run.p.pairs)
    for slug in targets:
        card = load_model(slug)
        for temp in run.p.temperatures:
            for batch in run.p.decode_batches:
                run_id = f"ar/{slug}/T{temp:g}/b{batch}"
                if (run_id,) in done:
                    continue
                t0 = time.perf_counter()
                res = autoregressive_decode(
                    run.models.get("target", card),
                    prompt=run.prompt(card, batch),
                    new_tokens=run.p.decode_tokens,
                    temperature=temp,
                    rng=unit_rng(run.seed, run_id),
                )
                run.append(
                    "autoregressive",
                    with_constants(
                        res.steps,
                        run_id=run_id,
                        model=slug,
                        temperature=float(temp),
                        batch=batch,
                        prompt_len=run.p.prompt_len,
                        **run.common,
                    ),
                )
                run.log(f"{run_id}: {time.perf_counter() - t0:.1f} s")


def specdec(run: RunState) -> None:
    done = done_keys(run.start("specdec"), ("run_id",))
    _drop_unfinished(run, finished=[key[0] for key in done])
    for t_slug, d_slug in run.p.pairs:
        target, draft = load_model(t_slug), load_model(d_slug)
        for temp in run.p.temperatures:
            for gamma in run.p.gammas:
                for batch in run.p.decode_batches:
                    run_id = f"sd/{t_slug}+{d_slug}/T{temp:g}/g{gamma}/b{batch}"
                    if (run_id,) in done:
                        continue
                    t0 = time.perf_counter()
                    if run.p.interleave:
                        interleaved(
                            run,
                            run_id,
                            target=target,
                            draft=draft,
                            temp=temp,
                            gamma=gamma,
                            batch=batch,
                        )
                        continue
                    res = speculative_decode(
                        run.models.get("target", target),
                        run.models.get("draft", draft, vocab=target.vocab),
                        prompt=run.prompt(target, batch),
                        new_tokens=run.p.decode_tokens,
                        gamma=gamma,
                        temperature=temp,
                        rng=unit_rng(run.seed, run_id),
                    )
                    # positions first: a run is done once its specdec rows exist.
                    run.append("positions", with_constants(res.positions, run_id=run_id))
                    run.append(
                        "specdec",
                        with_constants(
                            res.blocks,
                            run_id=run_id,
                            target=t_slug,
                            draft=d_slug,
                            temperature=float(temp),
                            gamma=gamma,
                            batch=batch,
                            prompt_len=run.p.prompt_len,
                            vocab=target.vocab,
                            **run.common,
                        ),
                    )
                    tokens = res.blocks.emitted.sum() / max(batch, 1)
                    run.log(
                        f"{run_id}: {len(res.blocks) // batch} blocks, "
                        f"{res.blocks.accepted.mean():.2f} accepted/block, "
                        f"{tokens:.0f} tokens, {time.perf_counter() - t0:.1f} s"
                    )


def _drop_unfinished(run: RunState, *, finished: list[str]) -> None:
    """Rows of runs cut short (not in ``finished``) dropped from the traces, so that those
    runs rerun in full: their positions and, when interleaved, their plain twins."""
    positions = run.start("positions")
    orphans = ~positions.run_id.isin(finished)
    if bool(orphans.any()):
        # A run cut between its appends: drop its positions, it reruns in full.
        traces.replace_rows(
            run.folder / "positions.csv", kind="positions", data=positions[~orphans]
        )
    if run.p.interleave:
        plain = run.start("autoregressive")
        twins = plain.run_id.str.contains("+", regex=False)
        lost = twins & ~plain.run_id.map(lambda r: "sd/" + r[3:]).isin(finished)
        if bool(lost.any()):
            traces.replace_rows(
                run.folder / "autoregressive.csv", kind="autoregressive", data=plain[~lost]
            )


def interleaved(
    run: RunState,
    run_id: str,
    *,
    target: ModelCard,
    draft: ModelCard,
    temp: float,
    gamma: int,
    batch: int,
) -> None:
    """One speculative run timed in turn with its plain twin until the speedup is known
    (:func:`specsim.measure.timing.interleaved_until`)."""
    t0 = time.perf_counter()

    def prompt(segment: int) -> np.ndarray:
        rng = unit_rng(run.seed, f"prompt/{target.slug}/{batch}/{segment}")
        return rng.integers(0, target.vocab, (batch, run.p.prompt_len))

    res, why, ratio = interleaved_until(
        run.models.get("target", target),
        run.models.get("draft", draft, vocab=target.vocab),
        prompt=prompt,
        new_tokens=run.p.decode_tokens,
        gamma=gamma,
        temperature=temp,
        rng=unit_rng(run.seed, run_id),
        halfwidth=run.p.speedup_halfwidth,
        min_blocks=run.p.min_blocks,
        max_blocks=run.p.max_blocks,
        max_s=run.p.max_run_s,
    )
    shared = {
        "temperature": float(temp),
        "batch": batch,
        "prompt_len": run.p.prompt_len,
        **run.common,
    }
    run.append("positions", with_constants(res.positions, run_id=run_id))
    run.append(
        "autoregressive",
        with_constants(res.steps, run_id="ar/" + run_id[3:], model=target.slug, **shared),
    )
    run.append(
        "specdec",
        with_constants(
            res.blocks,
            run_id=run_id,
            target=target.slug,
            draft=draft.slug,
            gamma=gamma,
            vocab=target.vocab,
            **shared,
        ),
    )
    run.log(
        f"{run_id}: {res.blocks.block.nunique()} blocks (stopped by {why}), "
        f"speedup {ratio[0]:.3f} "
        f"[{ratio[1]:.3f}, {ratio[2]:.3f}], {time.perf_counter() - t0:.1f} s"
    )


def assisted(run: RunState) -> None:
    if run.p.assisted_repeats == 0:
        return
    done = done_keys(run.start("assisted"), ("run_id",))

    def model(role: str, slug: str, vocab: int | None = None) -> Any:
        return run.models.get(role, load_model(slug), vocab=vocab)

    for run_id, rows in assisted_runs(
        pairs=run.p.pairs,
        gammas=run.p.gammas,
        temperatures=run.p.assisted_temperatures,
        repeats=run.p.assisted_repeats,
        new_tokens=run.p.decode_tokens,
        done=done,
        model=model,
        prompt=lambda t: run.prompt(t, 1),
        rng=lambda key: unit_rng(run.seed, key),
    ):
        run.append("assisted", [{**r, "prompt_len": run.p.prompt_len, **run.common} for r in rows])
        run.log(f"{run_id}: {rows[-1]['time_s']:.2f} s, {rows[-1]['target_passes']} target passes")
