"""Serving many requests: arrivals, continuous batching, a KV-memory limit, replicas.

One accelerator (or tensor-parallel group: one simpy resource, held while
there is work) serves a stream of requests; ``replicas`` of it sit behind a
router (:mod:`specsim.sim.serving.router`). Paged KV with preemption and chunked
prefill are options (:mod:`specsim.sim.serving.paged`); without them, an iteration:

1. admits waiting requests (the scheduler, :mod:`specsim.sim.serving.scheduler`: first
   come, first served by default) while the batch has room
   (``max_batch``) and their KV cache fits (prompt + output + lookahead
   reserved up front, so an admitted request never has to be evicted); the
   admitted prompts are prefilled in one pass of the target (and the draft),
   which also yields each request's first token (TTFT); a one-token request
   is then done and never joins the decoding batch;
2. asks the lookahead policy for each running sequence's ``gamma_i``, handing
   it the sequence's own history (its previous block's gamma and accepted
   count), so that a per-sequence policy walks each request exactly as it
   walks a single stream; a policy that declares a fixed gamma is not asked,
   and one that declares itself batch-wide is asked once per iteration
   (:mod:`specsim.policies.lookahead`). Gamma is capped at ``max_gamma`` (the KV
   reservation covers that much lookahead) and cut so that no block drafts
   past its request's last token; the history keeps the policy's gamma before
   that cut, as a single stream, which has no end, would see it;
3. runs the draft steps, step ``j`` batching every sequence with ``gamma_i > j`` (or, with
   a ``proposer``, the proposer's pass drafting each gamma:
   :class:`~specsim.sim.serving.drafting.ProposerDrafts`);
4. runs one verification pass over every sequence's ``gamma_i + 1`` positions
   (its cost from the cost model at that batch and those contexts);
5. emits each sequence's accepted tokens plus one and retires finished ones.

A run in which nothing runs and the head of the queue can never fit (a reservation that
was never released) raises a ValueError naming the request and the capacity
(:meth:`specsim.sim.serving.batch.Admission.check_progress`) instead of spinning forever.

The same workload is then served without speculation (``gamma = 0``), for the
speedup: the *plain twin*, skipped when the policy declares ``gamma = 0`` (the
run is its own twin) or ``plain_twin = False``. The draft shares the target's
accelerator (serialized). Once every request has arrived (and, paged or under
a budget, memory can no longer bind), a fixed-gamma run on the vectorized path
finishes without simpy, costed in bulk (:mod:`specsim.sim.serving.drain`,
:mod:`specsim.sim.serving.chunk_drain`; the same rows, bit for bit). Requests, admission
and the batch: :mod:`specsim.sim.serving.batch`; the result: :mod:`specsim.sim.results.records`,
with the engines' acceptance counters (:mod:`specsim.sim.serving.tally`).

The package: :mod:`~specsim.sim.serving.config` (:class:`ServingConfig`),
:mod:`~specsim.sim.serving.loop` (the :class:`~specsim.sim.serving.loop.Engine`: one
iteration loop for chains and token trees), :mod:`~specsim.sim.serving.chunked` (the
iteration under a token budget), :mod:`~specsim.sim.serving.plans` (the seams: what the
engine reads of a configuration, and a tree plan, :class:`~specsim.sim.serving.plans.TreePlan`,
which replaces step 2's gammas by a token tree per sequence; the tree fronts
:mod:`specsim.sim.serving.tree_serving` and :mod:`specsim.sim.serving.tree_serving_dynamic` serve
through it), :mod:`~specsim.sim.serving.drafting` (what the engine asks a proposer) and
:mod:`~specsim.sim.serving.simulate` (:func:`simulate_serving`). The parts it runs
on: :mod:`~specsim.sim.serving.batch` (requests, admission, the batch),
:mod:`~specsim.sim.serving.scheduler` (who starts: one-method objects),
:mod:`~specsim.sim.serving.paged` and :mod:`~specsim.sim.serving.prefill` (paged KV,
chunked prefill), :mod:`~specsim.sim.serving.router` (replicas and their routing rules),
:mod:`~specsim.sim.serving.drain`, :mod:`~specsim.sim.serving.chunk_drain` and
:mod:`~specsim.sim.serving.walks` (the bulk drains), :mod:`~specsim.sim.serving.tally`
(the engines' counters) and :mod:`~specsim.sim.serving.tree_batch` (what the tree fronts
share).
"""

from specsim.sim.serving.config import ServingConfig
from specsim.sim.serving.simulate import simulate_serving

__all__ = ["ServingConfig", "simulate_serving"]
