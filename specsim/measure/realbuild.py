"""The whole real-text build: corpora, shared tokenizer, encoded tokens, trained models.

:func:`build_real` runs the stages in order, each reused when its output is
already there and matches its inputs:

1. ``corpus``: :func:`specsim.measure.corpus.build_corpora` into ``<work>/corpora``
   (from the installed packages, or from the committed sample);
2. ``tokenizer``: byte-level BPE on the training split of every training
   corpus (licences never), saved as ``<models>/tokenizer.json`` with
   ``tokenizer.meta.json`` (vocabulary, sha256, the corpus manifest);
3. ``train``: every :class:`~specsim.measure.train.TrainConfig` of the plan,
   checkpointed under ``<work>/checkpoints``, saved into ``<models>``.

The command is ``specsim measure --device cpu --preset real --stage train
--work DIR --models models/tiny`` (see ``docs/real-acceptance.md``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specsim.checks import check_int
from specsim.measure.corpus import atomic_write_text, build_corpora, read_split
from specsim.measure.tinylm import load_tokenizer, tokenizer_sha256, train_tokenizer
from specsim.measure.train import PLAN, TRAIN_CORPORA, TrainConfig, encode_corpora
from specsim.measure.trainloop import train_model

__all__ = ["STAGES", "corpus_fingerprint", "build_tokenizer", "build_real"]

STAGES: tuple[str, ...] = ("corpus", "tokenizer", "train")
Log = Callable[[str], None]


def corpus_fingerprint(manifest: dict[str, Any], corpora: Sequence[str]) -> str:
    """sha256 over the sha256 of every split of ``corpora``: what a tokenizer was trained on."""
    parts = [
        f"{c}.{s}:{manifest['corpora'][c]['splits'][s]['sha256']}"
        for c in sorted(corpora)
        for s in sorted(manifest["corpora"][c]["splits"])
    ]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


def build_tokenizer(
    *,
    corpora_dir: str | os.PathLike[str],
    models_dir: str | os.PathLike[str],
    vocab_size: int,
    corpora: Sequence[str] = TRAIN_CORPORA,
    log: Log | None = None,
) -> str:
    """Train (or reuse) the shared tokenizer; return the path of ``tokenizer.json``."""
    say = log if log is not None else (lambda line: None)
    manifest = json.loads((Path(corpora_dir) / "manifest.json").read_text(encoding="utf-8"))
    fp = corpus_fingerprint(manifest, corpora)
    models = Path(models_dir)
    path = models / "tokenizer.json"
    meta_path = models / "tokenizer.meta.json"
    if path.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if (
            meta.get("corpus_fingerprint") == fp
            and meta.get("vocab_size") == vocab_size
            and meta.get("sha256") == tokenizer_sha256(load_tokenizer(path))
        ):
            say(f"tokenizer: reused {path}")
            return str(path)
    texts = [doc for c in corpora for doc in read_split(corpora_dir, c, "train")]
    sha = train_tokenizer(texts, vocab_size=vocab_size, path=path)
    atomic_write_text(
        meta_path,
        json.dumps(
            {
                "vocab_size": vocab_size,
                "sha256": sha,
                "trained_on": [f"{c}.train" for c in corpora],
                "corpus_fingerprint": fp,
                "corpus_manifest": manifest,
            },
            indent=2,
            sort_keys=True,
        )
        + "\n",
    )
    say(f"tokenizer: {vocab_size} tokens trained on {len(texts)} documents -> {path}")
    return str(path)


def build_real(
    *,
    work: str | os.PathLike[str],
    models_dir: str | os.PathLike[str],
    stages: Sequence[str] = STAGES,
    sample: str | os.PathLike[str] | None = None,
    vocab_size: int = 4096,
    plan: Sequence[TrainConfig] = PLAN,
    only: Sequence[str] | None = None,
    threads: int = 1,
    log: Log | None = None,
) -> dict[str, Any]:
    """Run the ``stages`` of the build; return what each produced (paths, sidecars).

    ``only`` restricts training to the named models of ``plan``.
    """
    for s in stages:
        if s not in STAGES:
            raise ValueError(f"stages: {s!r} is not one of {STAGES}")
    check_int(threads, name="threads", minimum=1)
    names = [c.name for c in plan]
    for n in only or ():
        if n not in names:
            raise ValueError(f"only: {n!r} is not a model of the plan {names}")
    work_dir = Path(work)
    corpora_dir = work_dir / "corpora"
    models = Path(models_dir)
    result: dict[str, Any] = {}
    if "corpus" in stages:
        result["manifest"] = build_corpora(out=corpora_dir, sample=sample, log=log)
    if not (corpora_dir / "manifest.json").is_file():
        raise FileNotFoundError(
            f"{corpora_dir}/manifest.json: no corpora in the --work folder; build them first "
            "with --stage corpus, which reads Debian's fortunes packages (apt-get install -y "
            "fortunes fortunes-de fortunes-es fortunes-it; docs/real-acceptance.md), or with "
            "--stage corpus --sample models/corpora/sample (the committed sample: enough for "
            "--stage alpha --shrink only)"
        )
    manifest = json.loads((corpora_dir / "manifest.json").read_text(encoding="utf-8"))
    if "tokenizer" in stages:
        result["tokenizer"] = build_tokenizer(
            corpora_dir=corpora_dir, models_dir=models, vocab_size=vocab_size, log=log
        )
    if "train" in stages:
        result["models"] = _train(
            plan,
            only=only,
            manifest=manifest,
            work_dir=work_dir,
            models=models,
            threads=threads,
            log=log,
        )
    return result


def _train(
    plan: Sequence[TrainConfig],
    *,
    only: Sequence[str] | None,
    manifest: dict[str, Any],
    work_dir: Path,
    models: Path,
    threads: int,
    log: Log | None,
) -> dict[str, Any]:
    """The train stage: the training corpora encoded (cached under ``work_dir``), each model
    of ``plan`` (or of ``only``) trained into ``models``, the corpora's manifest beside them."""
    corpora_dir = work_dir / "corpora"
    tok = load_tokenizer(models / "tokenizer.json")
    data = encode_corpora(
        corpora_dir=corpora_dir,
        tokenizer=tok,
        corpora=TRAIN_CORPORA,
        cache_dir=work_dir / "tokens",
    )
    info = {
        "corpus_fingerprint": corpus_fingerprint(manifest, TRAIN_CORPORA),
        "corpus_sample": bool(manifest.get("sample")),
    }
    trained: dict[str, Any] = {}
    for cfg in plan:
        if only and cfg.name not in only:
            continue
        trained[cfg.name] = train_model(
            cfg,
            tokenizer=tok,
            data=data,
            out_dir=models,
            checkpoint_dir=work_dir / "checkpoints",
            info=info,
            threads=threads,
            log=log,
        )
    atomic_write_text(
        models / "corpus-manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    )
    return trained
