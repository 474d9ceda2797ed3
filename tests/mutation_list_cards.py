"""The mutation check's entries for issue 33 item 5 and issue 35 item 6: local and sparse
attention layers in the cost model (:mod:`specsim.cost.attention`), the KV they hold, and the
one rule for where cards come from (:mod:`specsim.cards.files`); run by
``tests/mutations.py`` with the others. Not collected by pytest; importing it runs nothing.
"""

from __future__ import annotations

from mutation_list import Mutation  # beside this script: on the path

ATTN = "specsim/cost/attention.py"
ATTN_TESTS = ("tests/cost/test_attention.py",)
LOOKUP_TESTS = ("tests/cards/test_card_lookup.py", "tests/test_bad_inputs_cards.py")

CARDS: tuple[Mutation, ...] = (
    Mutation(
        "attention-chain-dropped",
        ATTN,
        "chained = S - B * (_dropped(c + n, ac) - _dropped(c, ac))",
        "chained = S - B * (_dropped(c + n, ac) - _dropped(c + 0.5 * n, ac))",
        "local attention: the pairs a window or chunk drops from a chain of new positions",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-window-mean-query",
        ATTN,
        "pairs = np.where(chain, chained, np.minimum(S, size * T))",
        "pairs = np.where(chain, chained, S)",
        "local attention: a token tree's pairs capped at the window per query",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-window-cached",
        ATTN,
        "return pairs, np.minimum(cached, (size - 1.0) * B)",
        "return pairs, cached",
        "sliding window: a pass reads at most the window of each sequence's cache",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-chunk-start",
        ATTN,
        "return np.where(chain, chained, mean), cached - B * start",
        "return np.where(chain, chained, mean), cached",
        "chunked attention: a pass reads only the current chunk's cached tokens",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-sparse-per-query",
        ATTN,
        "return pairs, T * np.minimum(c, size)",
        "return pairs, B * np.minimum(c, size)",
        "sparse attention: each query of a sequence gathers its own top-k from the cache",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-indexer-flops",
        ATTN,
        "S_eq = S_eq + S * ac.index_pair_ratio",
        "S_eq = S_eq + 0.0 * S * ac.index_pair_ratio",
        "sparse attention: the lightning indexer's flops over every visible key",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-indexer-keys",
        ATTN,
        "R_eq = R_eq + keys * ac.index_byte_ratio",
        "R_eq = R_eq + 0.0 * keys * ac.index_byte_ratio",
        "sparse attention: the indexer's keys read over the whole context",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-roofline-call",
        "specsim/cost/roofline.py",
        "attention, S, R = attention_time(co, T=T, S=S, R=R, cached=R0, batch=batch)",
        "_unused = attention_time(co, T=T, S=S, R=R, cached=R0, batch=batch)",
        "the roofline's attention term: local and sparse layers priced by their own sums",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-kv-held-window",
        ATTN,
        'tokens if ac.kind == "sparse" else np.minimum(tokens, ac.size * B)',
        "tokens",
        "the pass's resident KV: a local layer holds at most its window a sequence",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-footprint-window",
        ATTN,
        "held = (L - local) * context + local * np.minimum(context, kind.window)",
        "held = L * context",
        "the footprint of a sequence: a windowed layer holds only its window",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-footprint-index-keys",
        "specsim/cost/memory.py",
        "kv_bytes_per_token=model.layers * (per_layer + index),",
        "kv_bytes_per_token=model.layers * per_layer,",
        "the footprint of a sparse card: its index keys beside the latent",
        ATTN_TESTS,
    ),
    Mutation(
        "attention-global-layers",
        "specsim/cards/attention.py",
        "return layers // self.global_every",
        "return layers // (self.global_every + 1)",
        "local and global layers: a global layer every global_every (Gemma 3's 5:1)",
        ("tests/cards/test_attention_cards.py", *ATTN_TESTS),
    ),
    Mutation(
        "cards-searched-first-in-every-command",
        "specsim/cli/__init__.py",
        "with _cards_first(args):",
        "with contextlib.nullcontext():",
        "--cards: every kind of card found by every lookup of every command",
        LOOKUP_TESTS,
    ),
    Mutation(
        "cards-stack-by-its-fields",
        "specsim/cards/files.py",
        "if _STACK_ONLY & set(data):",
        'if "verify" in data:',
        "a stack profile is told by its fields (a stack without verify is still a stack)",
        LOOKUP_TESTS,
    ),
    Mutation(
        "cards-profile-shadowing-a-stack",
        "specsim/cards/stack_files.py",
        "if profiles and stacks:",
        "if profiles and stacks and False:",
        "a runtime profile named like a stack is refused, not silently replaced",
        LOOKUP_TESTS,
    ),
)
