"""Tests for the tokenizer asset, its reproducible training and the chat template."""

import hashlib

import pytest

from core.pretrain.tokenizer import DEFAULT_VOCAB_SIZE, TOKENIZER_SEED, train_tokenizer
from core.tasks.arithmetic import ArithmeticConfig, eval_set, make_prompts
from core.tokenizer.chat_template import (
    CHAT_TEMPLATE,
    CHAT_TEMPLATE_REV,
    encode_prompt,
    encode_response,
    render_prompt,
)
from core.tokenizer.tokenizer import DEFAULT_TOKENIZER_PATH, SPECIAL_TOKENS, Tokenizer


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def test_training_is_reproducible_and_matches_the_shipped_asset(tmp_path):
    first = train_tokenizer(tmp_path / "a.json", seed=TOKENIZER_SEED, vocab_size=DEFAULT_VOCAB_SIZE)
    second = train_tokenizer(
        tmp_path / "b.json", seed=TOKENIZER_SEED, vocab_size=DEFAULT_VOCAB_SIZE
    )
    assert first.revision == second.revision
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    # The asset was written by build_tokenizer_asset() with the same seed and size.
    assert first.revision == Tokenizer.load(DEFAULT_TOKENIZER_PATH).revision


def test_revision_is_the_file_sha256(tok):
    assert tok.revision == hashlib.sha256(DEFAULT_TOKENIZER_PATH.read_bytes()).hexdigest()


def test_vocab_size_is_honoured_and_checked(tmp_path):
    # 5 specials + 256 bytes + 9 merges.
    assert train_tokenizer(tmp_path / "small.json", vocab_size=270).vocab_size == 270
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(tmp_path / "bad.json", vocab_size=260)


def test_asset_shape(tok):
    assert tok.vocab_size == DEFAULT_VOCAB_SIZE
    vocab = [tok.id_to_token(i) for i in range(tok.vocab_size)]
    multi_digit = [t for t in vocab if t is not None and len(t) >= 2 and t.isdigit()]
    assert len(multi_digit) >= 10  # digit merges exist: the TITO hazard is real


def test_special_tokens_are_single_ids(tok):
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.user_id, tok.assistant_id) == (0, 1, 2, 3, 4)
    assert tok.special_ids == frozenset(range(5))
    for token_id, token in enumerate(SPECIAL_TOKENS):
        assert tok.encode(token) == [token_id]
        # Inside text it is still one ID, and it does not merge with its neighbours.
        assert tok.encode("12" + token + "34") == tok.encode("12") + [token_id] + tok.encode("34")
        assert tok.decode([token_id]) == token
        assert tok.decode([token_id], skip_special_tokens=True) == ""


def test_encode_prompt_layout(tok):
    ids = encode_prompt("37+45=", tok=tok)
    assert ids[:2] == [tok.bos_id, tok.user_id]
    assert ids[-1] == tok.assistant_id
    assert tok.decode(ids[2:-1]) == "37+45="
    assert not set(ids[2:-1]) & tok.special_ids
    assert encode_prompt("37+45=") == ids  # default tokenizer = the shipped asset


def test_round_trip_of_prompts_and_responses(tok):
    cfg = ArithmeticConfig(min_digits=1, max_digits=4, allow_negative=True)
    problems = make_prompts(300, seed=0, cfg=cfg) + eval_set(ArithmeticConfig())
    for p in problems:
        text = render_prompt(p.question) + p.answer + SPECIAL_TOKENS[2]
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert ids == encode_prompt(p.question, tok=tok) + encode_response(p.answer, tok=tok)
    assert tok.decode(tok.encode("What is 37 + 45? é")) == "What is 37 + 45? é"  # byte-level


def test_chat_template():
    assert render_prompt("37+45=") == "<|bos|><|user|>37+45=<|assistant|>"
    assert CHAT_TEMPLATE_REV == hashlib.sha256(CHAT_TEMPLATE.encode("utf-8")).hexdigest()
    # Pinned: changing the template must be a deliberate, visible revision bump.
    assert CHAT_TEMPLATE_REV == "a51780f05780ad92aefa1186e3dc58a66634d1bcd9e364f5cd2124445d1b7eed"
    with pytest.raises(ValueError, match="special token"):
        render_prompt("1+1=<|eos|>")
    with pytest.raises(ValueError, match="special token"):
        encode_response("2<|eos|>")


def test_load_rejects_a_tokenizer_without_our_special_ids(tmp_path):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    hf = HFTokenizer(models.BPE())
    hf.add_special_tokens(["<|eos|>", "<|pad|>"])
    path = tmp_path / "other.json"
    path.write_text(hf.to_str())
    with pytest.raises(ValueError, match="special tokens"):
        Tokenizer.load(path)
