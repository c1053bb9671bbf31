"""Verified rollouts: the samples of finished runs with their exact ids and verifier verdicts.

Read from the runs' telemetry (``tokens`` for the exact ids, ``reward_components`` for the
verifier's value), so the reward models train on what the policy actually produced. Samples
whose token rows were not kept (``telemetry.token_sample_rate``) or that the verifier did not
score are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.tokenizer.tokenizer import Tokenizer


@dataclass(frozen=True)
class VerifiedRollout:
    """One sample: exact ids, its question and response text, and the verifier's verdict."""

    ids: tuple[int, ...]
    """Prompt + generated token ids, as the rollout produced them."""
    n_prompt: int
    question: str
    """The prompt's text without special tokens (e.g. ``37+45=``)."""
    response: str
    """The generated text without special tokens (e.g. ``82``)."""
    finished: bool
    """The response ended on EOS."""
    verified: bool
    """The verifier scored it 1."""
    domain: str


_SQL = """
SELECT s.sample_id, s.domain, s.finish_reason, r.value AS verifier,
       list(t.token_id ORDER BY t.pos) AS ids, list(t.role ORDER BY t.pos) AS roles
FROM samples s
JOIN reward_components r ON r.sample_id = s.sample_id AND r.component = 'verifier'
JOIN tokens t ON t.sample_id = s.sample_id
WHERE r.value IS NOT NULL AND s.n_turns = 1
GROUP BY s.sample_id, s.domain, s.finish_reason, r.value
ORDER BY s.sample_id"""


def verified_rollouts(runs: Sequence[str | Path], *, tok: Tokenizer) -> list[VerifiedRollout]:
    """Every verified single-turn sample of ``runs`` (run directories), in run and sample order."""
    from observability import open_run

    out = []
    for run in runs:
        con = open_run(run)
        for _sid, domain, finish, verifier, ids, roles in con.execute(_SQL).fetchall():
            n_prompt = sum(r == "prompt" for r in roles)
            out.append(
                VerifiedRollout(
                    ids=tuple(int(i) for i in ids),
                    n_prompt=n_prompt,
                    question=tok.decode(ids[:n_prompt], skip_special_tokens=True),
                    response=tok.decode(ids[n_prompt:], skip_special_tokens=True),
                    finished=finish == "stop",
                    verified=float(verifier) == 1.0,
                    domain=str(domain),
                )
            )
        con.close()
    return out
