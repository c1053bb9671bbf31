"""The chat template: how a question becomes prompt text and token IDs, and a response its IDs.

One user turn, no system prompt, no multi-turn history. The template string has its own
revision (sha256 of the string), recorded beside the tokenizer revision in telemetry.
"""

from __future__ import annotations

import hashlib

from core.tokenizer.tokenizer import (
    ASSISTANT,
    BOS,
    SPECIAL_TOKENS,
    USER,
    Tokenizer,
    default_tokenizer,
)

CHAT_TEMPLATE = BOS + USER + "{question}" + ASSISTANT
"""``"<|bos|><|user|>{question}<|assistant|>"``; the response follows, ended by ``<|eos|>``."""

CHAT_TEMPLATE_REV = hashlib.sha256(CHAT_TEMPLATE.encode("utf-8")).hexdigest()
"""sha256 hex of ``CHAT_TEMPLATE``."""


HF_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}" + USER + "{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}" + ASSISTANT + "{{ m['content'] }}{{ eos_token }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "{% endif %}"
)
"""``CHAT_TEMPLATE`` as a Jinja chat template (``tokenizer_config.json`` of an HF export): one user
message with ``add_generation_prompt`` renders ``render_prompt``; a user + assistant pair renders
prompt + answer + ``<|eos|>`` (``encode_prompt`` + ``encode_response``)."""


def render_prompt(question: str) -> str:
    """The prompt text for ``question``; raises ValueError if it contains a special token."""
    for token in SPECIAL_TOKENS:
        if token in question:
            raise ValueError(f"question must not contain the special token {token!r}: {question!r}")
    return CHAT_TEMPLATE.format(question=question)


def encode_prompt(question: str, *, tok: Tokenizer | None = None) -> list[int]:
    """Prompt token IDs: ``[bos, user, *encode(question), assistant]``.

    ``tok`` defaults to the shipped asset. Special tokens map to their single IDs.
    """
    tok = tok if tok is not None else default_tokenizer()
    return tok.encode(render_prompt(question))


def encode_response(answer: str, *, tok: Tokenizer | None = None) -> list[int]:
    """Canonical response token IDs for SFT: ``[*encode(answer), eos]``."""
    tok = tok if tok is not None else default_tokenizer()
    for token in SPECIAL_TOKENS:
        if token in answer:
            raise ValueError(f"answer must not contain the special token {token!r}: {answer!r}")
    return tok.encode(answer) + [tok.eos_id]
