"""Reproducible training of the byte-level BPE tokenizer on the arithmetic task corpus.

The corpus is a seeded sample of questions and answers over a broad task config (1-4 digits,
both ops, negative results), so the vocabulary does not change when the task difficulty is tuned.
All 256 bytes are in the base alphabet; the remaining slots become digit merges, learned with the
GPT-2 pre-tokenizer split that keeps digit runs together. The shipped tokenizer then *encodes*
with digits split one per token (as LLaMA and DeepSeek tokenizers do: a model cannot learn
column arithmetic when "45" is one token and "37" two), so the canonical form of a number is one
token per digit, while the merged tokens ("46") stay in the vocabulary: the policy can sample
them, they decode to the same text, and re-encoding that text splits them — the TITO hazard.
Same seed and size give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from core.pretrain.corpus import sft_corpus
from core.tasks.arithmetic import ArithmeticConfig
from core.tokenizer.tokenizer import (
    DEFAULT_TOKENIZER_PATH,
    SPECIAL_TOKENS,
    Tokenizer,
    default_tokenizer,
)

TOKENIZER_SEED = 0
"""Seed of the corpus the shipped asset is trained on."""

DEFAULT_VOCAB_SIZE = 320
"""5 special tokens + 256 bytes + 59 merges."""

MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256
MAX_VOCAB_SIZE = 4096

CORPUS_PAIRS = 20_000
"""(question, answer) pairs in the training corpus."""

CORPUS_CFG = ArithmeticConfig(
    min_digits=1, max_digits=4, ops=("+", "-"), allow_negative=True, seed=TOKENIZER_SEED
)
"""The task config the corpus is drawn from (broader than any training config)."""


def train_tokenizer(
    out_path: str | Path,
    *,
    seed: int = TOKENIZER_SEED,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> Tokenizer:
    """Train the BPE tokenizer on a corpus drawn with ``seed``, write its JSON to ``out_path``.

    ``vocab_size`` counts special tokens and the 256 byte symbols, in
    [MIN_VOCAB_SIZE=261, MAX_VOCAB_SIZE=4096]. Returns the written tokenizer (its ``revision``
    is the sha256 of the file).
    """
    if not isinstance(vocab_size, int) or not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size must be an int in [{MIN_VOCAB_SIZE}, {MAX_VOCAB_SIZE}], got {vocab_size!r}"
        )
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(_corpus_texts(seed), trainer=trainer, length=2 * CORPUS_PAIRS)
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(hf.to_str(pretty=True) + "\n", encoding="utf-8")
    return Tokenizer.load(out_path)


def build_tokenizer_asset(out_path: str | Path = DEFAULT_TOKENIZER_PATH) -> Tokenizer:
    """Retrain the shipped asset with the default seed and size (``--retrain-tokenizer``)."""
    tok = train_tokenizer(out_path, seed=TOKENIZER_SEED, vocab_size=DEFAULT_VOCAB_SIZE)
    default_tokenizer.cache_clear()
    return tok


def _corpus_texts(seed: int) -> Iterator[str]:
    """Questions and answers as separate texts (no chat markup: specials never get merged)."""
    for question, answer in sft_corpus(CORPUS_PAIRS, seed, CORPUS_CFG):
        yield question
        yield answer
