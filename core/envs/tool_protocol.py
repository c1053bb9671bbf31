"""The calculator tool protocol and the multi-turn chat template built on it (one revision).

Every policy turn ends with EOS. A turn whose text is ``[A+B]`` or ``[A-B]`` (non-negative
integers, one operator) is a calculator call; any other turn is the final answer. The environment
answers a call with the observation ``<|user|>=R<|assistant|>`` (R the result), a call it cannot
parse with ``<|user|>=?<|assistant|>``. A whole episode therefore reads

    <|bos|><|user|>(37+48)-19=<|assistant|>[37+48]<|eos|><|user|>=85<|assistant|>[85-19]<|eos|>
    <|user|>=66<|assistant|>66<|eos|>

Observation ids are produced by the environment and appended to the exact ids the policy
generated (never re-tokenized). Simplification: a compact call syntax (``[..]`` instead of
``<call>..</call>``) because the tokenizer has no special tokens left and every character of a
call is a decode step on the CPU.
"""

from __future__ import annotations

import hashlib
import re

from core.tokenizer.chat_template import CHAT_TEMPLATE
from core.tokenizer.tokenizer import Tokenizer

TOOL_PROTOCOL = (
    "call: [A+B] | [A-B] then <|eos|>; result: <|user|>=R<|assistant|>; "
    "unparseable call: <|user|>=?<|assistant|>; any other turn is the final answer"
)
"""The protocol, as the revision hashes it."""

TOOL_TEMPLATE_REV = hashlib.sha256((CHAT_TEMPLATE + "\n" + TOOL_PROTOCOL).encode()).hexdigest()
"""sha256 of the chat template plus the tool protocol: the ``chat_template_rev`` of tool runs."""

_CALL = re.compile(r"\[([0-9]{1,6})([+-])([0-9]{1,6})\]")


def is_call(text: str) -> bool:
    """Whether a turn's text (EOS stripped) is a calculator call (well-formed or not)."""
    return text.startswith("[")


def parse_call(text: str) -> tuple[int, str, int] | None:
    """``(a, op, b)`` of a well-formed call ``[a op b]``, else None."""
    m = _CALL.fullmatch(text.strip())
    return None if m is None else (int(m.group(1)), m.group(2), int(m.group(3)))


def calculate(a: int, op: str, b: int) -> int:
    """The calculator itself."""
    return a + b if op == "+" else a - b


def render_call(a: int, op: str, b: int) -> str:
    return f"[{a}{op}{b}]"


def encode_observation(result: str, *, tok: Tokenizer) -> list[int]:
    """Observation ids of a tool result text (``"85"``, ``"?"`` or a malformed output)."""
    return [tok.user_id, *tok.encode("=" + result), tok.assistant_id]


def encode_turn(text: str, *, tok: Tokenizer) -> list[int]:
    """Ids of one policy turn as the SFT demonstrations spell it: ``encode(text) + [eos]``."""
    return [*tok.encode(text), tok.eos_id]
