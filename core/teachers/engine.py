"""A teacher engine: its own weights in an inference engine, scoring exact token ids by prefill.

``prefill_and_score(exact_ids, valid, positions)`` runs one teacher-forced prefill over the
student's exact ids (never re-tokenized) and returns, for the requested positions (prediction
space: position t scores token t + 1 given tokens ≤ t), the payload of the configured mode:
``sampled`` (log π_T of the sampled token), ``topk`` (the K most likely ids and their log-probs,
plus the sampled token's), ``full`` (log π_T over the vocabulary). All log-probs are processed:
logits / temperature, log-softmax over the full vocabulary, fp32. The payload's size is what an
engine would send to the trainer: positions × (4 B per log-prob + 4 B per int32 id); the teacher
also echoes the prefix hash of every position it scored (for the same-ids contract), which the
byte count leaves out. The ``sampled`` mode calls the rollout-engine protocol's own
``prefill_and_score`` (``core.rollout.protocol``), so any conforming engine can be that teacher;
``topk`` and ``full`` need the distribution, from the embedded engine's ``prefill_logits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from core.model.checkpoint import load_checkpoint
from core.rollout.engines import build_engine
from core.sync.convert import actor_to_rollout
from core.teachers.compat import check_compatible
from core.teachers.config import PAYLOADS
from core.tokenizer.tito import unpadded_prefix_hashes

LOGP_BYTES = 4
"""fp32 log-prob."""
ID_BYTES = 4
"""int32 token id."""


def payload_bytes_per_position(mode: str, *, k: int, vocab_size: int) -> int:
    """Bytes one scored position costs in payload ``mode``."""
    if mode == "sampled":
        return LOGP_BYTES
    if mode == "topk":
        return k * (ID_BYTES + LOGP_BYTES) + LOGP_BYTES
    if mode == "full":
        return vocab_size * LOGP_BYTES
    raise ValueError(f"teachers.payload={mode!r} not in {list(PAYLOADS)}")


@dataclass
class TeacherScores:
    """One teacher's payload for N sequences of T slots (prediction space [N, T-1])."""

    teacher_id: str
    mode: str
    logp: torch.Tensor
    """[N, T-1] fp32: log π_T of token t + 1 (0 where not ``scored``)."""
    scored: torch.Tensor
    """[N, T-1] bool: the positions the payload covers."""
    topk_ids: torch.Tensor | None
    """[N, T-1, K] int64 (``topk``) or None."""
    topk_logp: torch.Tensor | None
    """[N, T-1, K] fp32 (``topk``) or None."""
    full_logp: torch.Tensor | None
    """[N, T-1, V] fp32 (``full``) or None."""
    prefix_hash: torch.Tensor
    """[N, T] int64: the teacher's hash of each real slot's prefix (0 on padding)."""
    nbytes: int
    """Payload bytes (scored positions × the mode's bytes per position)."""


class TeacherEngine:
    """An inference engine holding a teacher's weights (version 0, never synced)."""

    def __init__(self, teacher_id: str, engine, *, source: str = "", meta: dict | None = None):
        self.teacher_id = teacher_id
        self.engine = engine
        self.source = source
        """The checkpoint directory it was loaded from."""
        self.meta = meta or {}

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        tokenizer_rev: str,
        vocab_hash: str,
        chat_template_rev: str,
        vocab_size: int,
        precision: str = "fp32",
        engine: str = "embedded",
    ) -> TeacherEngine:
        """Load a checkpoint as a teacher after the compatibility check (``TeacherIncompatible``)."""
        path = Path(path)
        weights, cfg, meta = load_checkpoint(path)
        teacher_id = teacher_name(path, meta)
        check_compatible(
            f"teacher {teacher_id!r}",
            meta,
            cfg,
            tokenizer_rev=tokenizer_rev,
            vocab_hash=vocab_hash,
            chat_template_rev=chat_template_rev,
            vocab_size=vocab_size,
        )
        served = build_engine(engine, cfg, precision=precision, instance=f"teacher/{teacher_id}")
        served.load_weights(actor_to_rollout(weights, cfg), version=0)
        return cls(teacher_id, served, source=str(path), meta=meta)

    @property
    def weights(self) -> dict:
        """The engine's installed weights (engine layout), for the memory ledger."""
        return self.engine.weights

    @torch.no_grad()
    def prefill_and_score(
        self,
        exact_ids: torch.Tensor,
        valid: torch.Tensor,
        positions: torch.Tensor,
        *,
        mode: str,
        k: int = 16,
        temperature: float = 1.0,
    ) -> TeacherScores:
        """Score ``exact_ids`` at ``positions`` in payload ``mode``.

        Args:
            exact_ids: [N, T] int64 exact token ids; valid: [N, T] bool, one contiguous run of
                real slots per row (padding before and after it).
            positions: [N, T-1] bool, the prediction-space positions to send (their token t + 1
                must be real).
        """
        if mode not in PAYLOADS:
            raise ValueError(f"teachers.payload={mode!r} not in {list(PAYLOADS)}")
        if not temperature > 0:
            raise ValueError(f"temperature={temperature} must be > 0")
        n, t = exact_ids.shape
        if positions.shape != (n, t - 1) or bool((positions & ~valid[:, 1:]).any()):
            raise ValueError("positions must be [N, T-1] and cover only real next tokens")
        zero = torch.zeros((), dtype=torch.float32)
        topk_ids = topk_logp = full = None
        if mode == "sampled":  # the protocol's own scoring call: any rollout engine serves
            seqs = [exact_ids[i][valid[i]].tolist() for i in range(n)]
            first = valid.long().argmax(dim=1).tolist()  # each sequence's first real slot
            lp = torch.zeros((n, t - 1), dtype=torch.float32)
            for i, row in enumerate(self.engine.prefill_and_score(seqs, temperature=temperature)):
                lp[i, first[i] : first[i] + len(row)] = row  # its real slots are contiguous
            logp = torch.where(positions, lp, zero)
        else:
            logits = self.engine.prefill_logits(exact_ids, valid)[:, :-1]  # [N, T-1, V]
            logp_all = (logits.float() / temperature).log_softmax(-1)  # [N, T-1, V]
            logp = torch.where(positions, logp_all.gather(-1, exact_ids[:, 1:, None])[..., 0], zero)
            if mode == "topk":
                if k > logp_all.shape[-1]:
                    raise ValueError(f"teachers.topk={k} > the vocabulary ({logp_all.shape[-1]})")
                topk_logp, topk_ids = logp_all.topk(k, dim=-1)  # [N, T-1, K]
                topk_logp = torch.where(positions[..., None], topk_logp, zero)
            else:
                full = torch.where(positions[..., None], logp_all, zero)
        per = payload_bytes_per_position(mode, k=k, vocab_size=self.engine.cfg.vocab_size)
        return TeacherScores(
            teacher_id=self.teacher_id,
            mode=mode,
            logp=logp,
            scored=positions.clone(),
            topk_ids=topk_ids,
            topk_logp=topk_logp,
            full_logp=full,
            prefix_hash=unpadded_prefix_hashes(exact_ids, valid),
            nbytes=int(positions.sum()) * per,
        )


def teacher_name(path: Path, meta: dict) -> str:
    """A teacher's id: its directory's name (the run's, for ``RUN_DIR/checkpoint``) and the first
    8 hex digits of its weights' sha256, e.g. ``addition@1a2b3c4d``."""
    name = path.parent.name if path.name == "checkpoint" else path.name
    return f"{name}@{str(meta.get('weights_sha256', ''))[:8]}"
