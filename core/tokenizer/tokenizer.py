"""The project tokenizer: a thin wrapper over a HuggingFace ``tokenizers`` byte-level BPE JSON.

Its revision is the sha256 of the JSON file, so telemetry can pin exactly which vocabulary and
merges produced a run's token IDs; ``vocab_hash`` pins the id ↔ token map alone (what two models
must share to compare log-probs token by token). Special tokens (``SPECIAL_TOKENS``) hold IDs 0..4 in that
order and are matched as single tokens wherever they appear in text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

PAD, BOS, EOS, USER, ASSISTANT = "<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, USER, ASSISTANT)
"""Special tokens; token ``SPECIAL_TOKENS[i]`` has ID ``i``."""

DEFAULT_TOKENIZER_PATH = Path(__file__).resolve().parent.parent / "assets" / "tokenizer.json"
"""The shipped asset, built by ``core.pretrain.tokenizer.build_tokenizer_asset``."""


class Tokenizer:
    """Byte-level BPE tokenizer with the project's special tokens.

    Attributes: ``path``, ``revision`` (sha256 hex of the JSON file), ``vocab_hash`` (sha256 hex of
    the sorted id → token map), ``vocab_size`` (including special tokens), ``pad_id``, ``bos_id``, ``eos_id``, ``user_id``, ``assistant_id``,
    ``special_ids`` (frozenset of the five).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        raw = self.path.read_bytes()
        self.revision = hashlib.sha256(raw).hexdigest()
        self._tok = HFTokenizer.from_str(raw.decode("utf-8"))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        vocab = sorted((i, t) for t, i in self._tok.get_vocab(with_added_tokens=True).items())
        self.vocab_hash = hashlib.sha256(json.dumps(vocab).encode("utf-8")).hexdigest()
        ids = [self._tok.token_to_id(token) for token in SPECIAL_TOKENS]
        if ids != list(range(len(SPECIAL_TOKENS))):
            raise ValueError(
                f"{self.path}: special tokens {SPECIAL_TOKENS} must have IDs 0..4, got {ids}"
            )
        self.pad_id, self.bos_id, self.eos_id, self.user_id, self.assistant_id = ids
        self.special_ids = frozenset(ids)

    @classmethod
    def load(cls, path: str | Path = DEFAULT_TOKENIZER_PATH) -> Tokenizer:
        """Load a tokenizer JSON (default: the shipped asset)."""
        return cls(path)

    def encode(self, text: str) -> list[int]:
        """Token IDs of ``text``; special-token strings inside it become their single IDs."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Text of ``ids`` (a list of ints; call ``.tolist()`` on a tensor first)."""
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary entry of ``token_id`` (byte-level form, e.g. ``'Ġ'`` for a space)."""
        return self._tok.id_to_token(token_id)

    def token_to_id(self, token: str) -> int | None:
        """The ID of a vocabulary entry, or None if it is not in the vocabulary."""
        return self._tok.token_to_id(token)

    def __repr__(self) -> str:
        return (
            f"Tokenizer(path={str(self.path)!r}, vocab_size={self.vocab_size}, "
            f"revision={self.revision[:12]})"
        )


@lru_cache(maxsize=1)
def default_tokenizer() -> Tokenizer:
    """The shipped asset, loaded once per process."""
    return Tokenizer.load(DEFAULT_TOKENIZER_PATH)
