"""One policy turn for a batch of sessions: session-KV reuse, per-row RNG, switch points.

Layout of the batch cache (``S = P + U + max_new`` slots): row i's cached prefix (``r_i`` tokens
from its ``KVEntry``) sits right-aligned at ``[P − r_i, P)``, its uncached context (``u_i``
tokens) right-aligned at ``[P + U − u_i, P + U)``, generated tokens from ``P + U`` on; the gaps
are invalid keys. Positions count valid slots (``positions_from_padding``), so cached keys keep
the RoPE positions they were computed at. One prefill of the ``U`` uncached columns gives every
row's next-token logits at slot ``P + U − 1``.

Before every decode step the decoder calls ``switch()`` (a ``DoubleBufferedWeights.switch_point``):
a switch lands only there, never inside a forward. After a switch the keys/values computed under
the old version are recomputed (``kv_on_switch = "invalidate"``: one prefill of every valid slot
under the new weights) or kept (``"keep"``, the fault). Each token records ``version`` (the weights
of the forward whose logits it was sampled from) and ``kv_version`` (the oldest version among the
keys/values that forward attended): equal unless KV of another version was used.
Sampling uses each row's own uniforms (seeded by the request), so a row's tokens do not depend on
its batch-mates. Simplification: uses the embedded engine's ``_forward`` directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from core.rollout.kv_cache import KVEntry, SessionKVCache
from core.rollout.sampling import SamplingParams, sample_tokens


@dataclass(frozen=True)
class TurnRequest:
    """Generate one turn of one session."""

    session_id: int
    context: tuple[int, ...]
    """The session's exact ids so far."""
    seed: int
    """Seeds this turn's sampling uniforms."""
    turn: int = 0
    greedy: bool = False


@dataclass
class TurnOutput:
    """A generated turn."""

    session_id: int
    turn: int
    worker: int
    ids: list[int]
    logp: list[float]
    version: list[int]
    kv_version: list[int]
    finished: bool
    reused: int
    """Context tokens whose keys/values came from the session cache."""
    t_start: float
    t_end: float
    switches: list[int] = field(default_factory=list)
    """Versions that went live while this turn decoded."""


def _logits(engine, ids, valid, *, start: int, cache: list) -> torch.Tensor:
    """[B, V] next-token logits after the chunk ``ids`` (slots ``start..``) through the engine's
    own forward (its private chunk API: the one place this module depends on it)."""
    return engine._forward(ids, valid, start=start, cache=cache, routes={}, topk={}, last=True)[
        :, -1
    ]


def _uniform_rows(requests, max_new: int) -> torch.Tensor:
    """[B, max_new] fp32: each row's uniforms from its own seeded generator."""
    rows = []
    for r in requests:
        g = torch.Generator().manual_seed(r.seed)
        rows.append(torch.rand(max_new, generator=g))
    return torch.stack(rows)


@torch.no_grad()
def decode_turns(
    engine,
    requests: list[TurnRequest],
    params: SamplingParams,
    *,
    eos_id: int,
    pad_id: int,
    kv: SessionKVCache | None = None,
    switch: Callable[[], object] | None = None,
    worker: int = 0,
) -> list[TurnOutput]:
    """Generate one turn for each request (see the module docstring)."""
    t_start = time.time()
    b, max_new = len(requests), params.max_new_tokens
    switches: list[int] = []
    if switch is not None and switch() is not None:  # a version staged before the turn
        switches.append(engine.policy_version)
        if kv is not None:
            kv.switched(engine.policy_version)
    found = [kv.lookup(r.session_id, list(r.context)) if kv else (None, 0) for r in requests]
    reuse = [n for _, n in found]
    uncached = [len(r.context) - n for r, n in zip(requests, reuse, strict=True)]
    p, u = max(reuse), max(uncached)
    s_total = p + u + max_new
    cfg = engine.cfg
    longest = max(len(r.context) for r in requests)
    if longest + max_new > cfg.max_seq_len:
        raise ValueError(f"context {longest} + max_new_tokens {max_new} > {cfg.max_seq_len}")
    ids = torch.full((b, s_total), pad_id, dtype=torch.int64)
    valid = torch.zeros((b, s_total), dtype=torch.bool)
    slot_version = torch.full((b, s_total), -1, dtype=torch.int64)
    shape = (b, s_total, cfg.num_kv_heads, cfg.head_dim)
    cache = [
        (torch.zeros(shape, dtype=engine.dtype), torch.zeros(shape, dtype=engine.dtype))
        for _ in range(cfg.num_layers)
    ]
    for i, (r, (entry, n)) in enumerate(zip(requests, found, strict=True)):
        ctx = torch.tensor(r.context, dtype=torch.int64)
        if n:
            ids[i, p - n : p] = ctx[:n]
            valid[i, p - n : p] = True
            slot_version[i, p - n : p] = entry.slot_version[:n]
            for layer, (k, v) in enumerate(cache):
                k[i, p - n : p] = entry.keys[layer][:n]
                v[i, p - n : p] = entry.values[layer][:n]
        ids[i, p + u - uncached[i] : p + u] = ctx[n:]
        valid[i, p + u - uncached[i] : p + u] = True
    live = engine.policy_version
    logits = _logits(engine, ids[:, p : p + u], valid[:, : p + u], start=p, cache=cache)
    slot_version[:, p : p + u] = torch.where(valid[:, p : p + u], live, -1)
    big = torch.iinfo(torch.int64).max

    def kv_min(upto: int) -> torch.Tensor:  # [B] oldest version among the valid slots < upto
        v = torch.where(valid[:, :upto], slot_version[:, :upto], big)
        return v.min(dim=1).values

    logit_version = torch.full((b,), live, dtype=torch.int64)
    logit_kv = kv_min(p + u)
    uniforms = _uniform_rows(requests, max_new)
    greedy = torch.tensor([r.greedy for r in requests])
    out_ids = [[] for _ in range(b)]
    out_lp, out_v, out_kv = ([[] for _ in range(b)] for _ in range(3))
    alive = torch.ones(b, dtype=torch.bool)
    cur = p + u
    for step in range(max_new):
        event = switch() if switch is not None else None
        if event is not None:
            live = engine.policy_version
            switches.append(live)
            if kv is not None:
                kv.switched(live)
            if kv is None or kv.on_switch == "invalidate":  # recompute every valid slot
                logits = _logits(engine, ids[:, :cur], valid[:, :cur], start=0, cache=cache)
                slot_version[:, :cur] = torch.where(valid[:, :cur], live, -1)
                logit_version[:] = live
                logit_kv = kv_min(cur)
        tok, lp = sample_tokens(logits, params, None, uniforms=uniforms[:, step])
        if bool(greedy.any()):
            g_tok, g_lp = sample_tokens(logits, params, None, greedy=True)
            tok, lp = torch.where(greedy, g_tok, tok), torch.where(greedy, g_lp, lp)
        for i in torch.nonzero(alive).flatten().tolist():
            out_ids[i].append(int(tok[i]))
            out_lp[i].append(float(lp[i]))
            out_v[i].append(int(logit_version[i]))
            out_kv[i].append(int(logit_kv[i]))
        alive = alive & (tok != eos_id)
        if not bool(alive.any()) or step == max_new - 1:
            break
        ids[:, cur] = torch.where(alive, tok, pad_id)
        valid[:, cur] = alive
        logits = _logits(engine, ids[:, cur : cur + 1], valid[:, : cur + 1], start=cur, cache=cache)
        slot_version[:, cur] = torch.where(alive, live, -1)
        logit_version[:] = live
        logit_kv = kv_min(cur + 1)
        cur += 1
    t_end = time.time()
    outs = []
    for i, r in enumerate(requests):
        if kv is not None:  # the slots forwarded: context + all generated tokens but the last
            keep = valid[i, :cur].clone()
            kv.store(
                KVEntry(
                    r.session_id,
                    worker,
                    list(r.context) + out_ids[i][:-1],
                    [k[i, :cur][keep].clone() for k, _ in cache],
                    [v[i, :cur][keep].clone() for _, v in cache],
                    slot_version[i, :cur][keep].clone(),
                )
            )
        outs.append(
            TurnOutput(
                r.session_id,
                r.turn,
                worker,
                out_ids[i],
                out_lp[i],
                out_v[i],
                out_kv[i],
                finished=bool(out_ids[i]) and out_ids[i][-1] == eos_id,
                reused=reuse[i],
                t_start=t_start,
                t_end=t_end,
                switches=list(switches),
            )
        )
    return outs
