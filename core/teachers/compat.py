"""Teacher / student compatibility, checked before training starts (and for reward models).

A teacher's log-prob of token id y is comparable with the student's only if both map ids to the
same strings and read prompts rendered the same way: the teacher checkpoint's recorded tokenizer
revision, vocabulary hash and chat-template revision must equal the student's, and its output
layer must cover the same vocabulary. A checkpoint that does not record one of them cannot be
proven compatible and is refused too (fail closed).
"""

from __future__ import annotations

from core.model.config import ModelConfig


class TeacherIncompatible(ValueError):
    """The model cannot read the student's token ids (the message names the field)."""


def check_compatible(
    what: str,
    meta: dict,
    cfg: ModelConfig | None,
    *,
    tokenizer_rev: str,
    vocab_hash: str,
    chat_template_rev: str,
    vocab_size: int,
) -> None:
    """Raise ``TeacherIncompatible`` unless the checkpoint ``meta``/``cfg`` of ``what`` (e.g.
    ``"teacher 'addition@1a2b3c4d'"``) matches the student's tokenizer revision, vocabulary hash,
    chat template and vocabulary size (``cfg.vocab_size``, or ``meta["vocab_size"]`` without a
    model config)."""
    expected = {
        "tokenizer_rev": tokenizer_rev,
        "vocab_hash": vocab_hash,
        "chat_template_rev": chat_template_rev,
    }
    for key, want in expected.items():
        got = meta.get(key)
        if got is None:
            raise TeacherIncompatible(
                f"{what}: its checkpoint records no {key}; compatibility with "
                f"the student cannot be checked (student {key} {want[:12]})"
            )
        if got != want:
            raise TeacherIncompatible(
                f"{what} is incompatible with the student: {key} {got[:12]} != "
                f"student's {want[:12]} (it would read other tokens)"
            )
    got_vocab = cfg.vocab_size if cfg is not None else meta.get("vocab_size")
    if got_vocab != vocab_size:
        raise TeacherIncompatible(
            f"{what} is incompatible with the student: vocab_size {got_vocab} != student's "
            f"{vocab_size}"
        )
