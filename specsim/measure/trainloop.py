"""One model's training run (:func:`train_model`) for the plan of
:mod:`specsim.measure.train`, whose docstring says how each step's batch is drawn, how a
run resumes from its checkpoint and how validation loss is measured."""

from __future__ import annotations

import io
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from specsim.measure.corpus import atomic_write_bytes
from specsim.measure.tinylm import build_tiny, load_tiny, param_count, save_tiny, tokenizer_sha256
from specsim.measure.train import (
    TRAIN_CORPORA,
    TokenData,
    TrainConfig,
    batch_windows,
    validation_loss,
)

__all__ = ["train_model"]

Log = Callable[[str], None]


def _lr(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def _save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def train_model(
    cfg: TrainConfig,
    *,
    tokenizer: Tokenizer,
    data: TokenData,
    out_dir: str | os.PathLike[str],
    checkpoint_dir: str | os.PathLike[str],
    info: dict[str, Any] | None = None,
    threads: int = 1,
    log: Log | None = None,
) -> dict[str, Any]:
    """Train ``cfg`` (resuming from its checkpoint if one exists); save it; return its sidecar.

    Writes ``<out_dir>/<name>.safetensors`` and ``.json``; a finished model
    whose sidecar records the same config is reused, not retrained.
    """
    say = log if log is not None else (lambda line: None)
    if data.tokenizer_sha256 != tokenizer_sha256(tokenizer):
        raise ValueError("data: encoded with another tokenizer than the one given")
    out = Path(out_dir)
    final = out / f"{cfg.name}.safetensors"
    cfg_json = json.loads(json.dumps(cfg.as_dict()))
    reused = _trained_before(final, cfg_json=cfg_json, data=data)
    if reused is not None:
        say(f"{cfg.name}: already trained ({final}); reused")
        return reused
    torch.set_num_threads(threads)
    teacher, model, opt = _start(cfg, out=out, tokenizer=tokenizer)
    ckpt = Path(checkpoint_dir) / f"{cfg.name}.ckpt.pt"
    step, history = _resume(ckpt, model=model, opt=opt, cfg_json=cfg_json, data=data, say=say)
    say(
        f"{cfg.name}: {param_count(model):,} parameters ({cfg.spec.family}), {cfg.steps} steps "
        f"of {cfg.batch}x{cfg.spec.context} tokens, mixture {cfg.mixture}"
    )
    t0 = time.perf_counter()
    _train_steps(
        cfg,
        model=model,
        teacher=teacher,
        opt=opt,
        data=data,
        step=step,
        history=history,
        ckpt=ckpt,
        cfg_json=cfg_json,
        started=t0,
        say=say,
    )
    sidecar = _save_trained(
        cfg,
        model=model,
        data=data,
        final=final,
        tokenizer=tokenizer,
        info={**(info or {}), "train": cfg_json, "history": history},
        started=t0,
        say=say,
    )
    ckpt.unlink(missing_ok=True)
    return sidecar


def _save_trained(
    cfg: TrainConfig,
    *,
    model: Any,
    data: TokenData,
    final: Path,
    tokenizer: Tokenizer,
    info: dict[str, Any],
    started: float,
    say: Log,
) -> dict[str, Any]:
    """The trained model in eval mode, its final validation loss on every training corpus,
    saved at ``final`` with ``info`` in its sidecar; the sidecar."""
    model.eval()
    final_val = validation_loss(
        model, data, corpora=TRAIN_CORPORA, count=cfg.eval_windows, length=cfg.spec.context + 1
    )
    say(f"{cfg.name}: final validation " + " ".join(f"{k} {v:.3f}" for k, v in final_val.items()))
    return save_tiny(
        model,
        path=final,
        tokenizer=tokenizer,
        spec=cfg.spec,
        info={
            **info,
            "final_validation_loss": final_val,
            "train_seconds_this_run": time.perf_counter() - started,
        },
    )


def _trained_before(
    final: Path, *, cfg_json: dict[str, Any], data: TokenData
) -> dict[str, Any] | None:
    """The sidecar of a finished model at ``final`` trained with the same config and
    tokenizer, or None (then it is trained)."""
    if final.is_file() and final.with_suffix(".json").is_file():
        side = json.loads(final.with_suffix(".json").read_text(encoding="utf-8"))
        if side.get("train") == cfg_json and side.get("tokenizer_sha256") == data.tokenizer_sha256:
            return dict(side)
    return None


def _start(
    cfg: TrainConfig, *, out: Path, tokenizer: Tokenizer
) -> tuple[Any | None, Any, torch.optim.AdamW]:
    """The teacher (if ``cfg`` distils, loaded from ``out``), the new model seeded by
    ``cfg.seed`` in training mode, and its optimizer."""
    teacher = None
    if cfg.teacher is not None:
        teacher, _ = load_tiny(out / f"{cfg.teacher}.safetensors", tokenizer=tokenizer)
    model = build_tiny(cfg.spec, tokenizer=tokenizer, seed=cfg.seed)
    model.train()
    return teacher, model, _optimizer(model, cfg)


def _optimizer(model: Any, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on norms and biases)."""
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )


def _resume(
    ckpt: Path,
    *,
    model: Any,
    opt: torch.optim.Optimizer,
    cfg_json: dict[str, Any],
    data: TokenData,
    say: Log,
) -> tuple[int, list[dict[str, Any]]]:
    """The step and loss history to start from: the checkpoint's (model and optimizer
    restored from it), or 0 and none; a ValueError for another config's checkpoint."""
    if not ckpt.is_file():
        return 0, []
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    if state.get("train") != cfg_json or state.get("tokenizer") != data.tokenizer_sha256:
        raise ValueError(
            f"checkpoint {ckpt}: written for another config or tokenizer; delete it to start over"
        )
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    step = int(state["step"])
    say(f"{cfg_json['name']}: resumed at step {step} from {ckpt}")
    return step, list(state["history"])


def _train_steps(
    cfg: TrainConfig,
    *,
    model: Any,
    teacher: Any | None,
    opt: torch.optim.Optimizer,
    data: TokenData,
    step: int,
    history: list[dict[str, Any]],
    ckpt: Path,
    cfg_json: dict[str, Any],
    started: float,
    say: Log,
) -> None:
    """Steps from ``step`` to ``cfg.steps``: each batch drawn from ``(seed, step)``, the
    running loss logged, validation appended to ``history``, checkpoints written."""
    length = cfg.spec.context + 1
    mix_val = [c for c in cfg.mixture]
    start_step = step
    running = 0.0
    while step < cfg.steps:
        x = torch.from_numpy(
            batch_windows(
                data,
                mixture=cfg.mixture,
                split="train",
                batch=cfg.batch,
                length=length,
                rng=np.random.default_rng([cfg.seed, step]),
            )
        )
        lv = _step(cfg, model=model, teacher=teacher, opt=opt, x=x, step=step)
        step += 1
        running = 0.9 * running + 0.1 * lv if step > start_step + 1 else lv
        if step % 25 == 0 or step == cfg.steps:
            rate = (step - start_step) / (time.perf_counter() - started)
            eta = (cfg.steps - step) / rate if rate > 0 else float("nan")
            say(
                f"{cfg.name}: step {step}/{cfg.steps} loss {running:.3f} "
                f"lr {_lr(cfg, step - 1):.2e} {rate:.2f} step/s eta {eta / 60:.1f} min"
            )
        if step % cfg.eval_every == 0 or step == cfg.steps:
            val = validation_loss(
                model, data, corpora=mix_val, count=cfg.eval_windows, length=length
            )
            history.append({"step": step, "train_loss": running, "validation": val})
            say(
                f"{cfg.name}: step {step} validation "
                + " ".join(f"{k} {v:.3f}" for k, v in val.items())
            )
        if step % cfg.checkpoint_every == 0 and step < cfg.steps:
            _save_checkpoint(
                ckpt,
                {
                    "train": cfg_json,
                    "tokenizer": data.tokenizer_sha256,
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "step": step,
                    "history": history,
                },
            )


def _step(
    cfg: TrainConfig,
    *,
    model: Any,
    teacher: Any | None,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    step: int,
) -> float:
    """One optimizer step on the batch ``x`` at the step's learning rate: next-token cross
    entropy, or with a teacher forward KL to its softmax; the loss."""
    for g in opt.param_groups:
        g["lr"] = _lr(cfg, step)
    logits = model(input_ids=x[:, :-1]).logits.float()
    flat = logits.reshape(-1, logits.shape[-1])
    if teacher is not None:
        with torch.no_grad():
            tlog = F.log_softmax(teacher(input_ids=x[:, :-1]).logits.float(), dim=-1)
        loss = F.kl_div(
            F.log_softmax(flat, dim=-1),
            tlog.reshape(flat.shape),
            log_target=True,
            reduction="batchmean",
        )
    else:
        loss = F.cross_entropy(flat, x[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())
