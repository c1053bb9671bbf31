"""The long-horizon recall environment: episode shape, verifier, held-out split, config errors,
and the flawed teacher's replies."""

from __future__ import annotations

import pytest

from core.envs.longhorizon import (
    LongHorizonConfig,
    LongHorizonSource,
    is_held_out,
)
from core.model.config import ModelConfig
from core.pretrain.longhorizon_teacher import TeacherEngine
from core.tokenizer.tokenizer import Tokenizer

TOK = Tokenizer.load()


def _play(env, answer: str):
    ids = env.reset()
    text = [TOK.decode(ids)]
    ok = TOK.encode("ok") + [TOK.eos_id]
    n = len(env.episode.distractors)
    for _ in range(n + 1):
        res = env.step(ok, finished=True)
        assert not res.done
        text.append(TOK.decode(list(res.observation)))
    res = env.step(TOK.encode(answer) + [TOK.eos_id], finished=True)
    assert res.done
    return text, res


def test_episode_shape_and_verifier():
    env = LongHorizonSource(LongHorizonConfig(), TOK).sample(1, seed=3)[0]
    ep = env.episode
    text, res = _play(env, ep.answer)
    assert text[0] == f"<|bos|><|user|>{ep.facts_text}<|assistant|>"
    assert text[-1] == f"<|user|>{ep.question}?<|assistant|>"
    assert res.rewards == {"verifier": 1.0} and res.failure_reason is None
    assert 5 <= len(ep.distractors) <= 8
    assert {k for k, _ in ep.distractors}.isdisjoint({"a", "b"})
    _, res = _play(env, "100")
    assert res.rewards == {"verifier": 0.0} and res.failure_reason == "wrong"


def test_truncated_answer_fails():
    env = LongHorizonSource(LongHorizonConfig(min_turns=1, max_turns=1), TOK).sample(1, seed=0)[0]
    env.reset()
    env.step([1], finished=True)
    env.step([1], finished=True)
    res = env.step(TOK.encode(env.episode.answer), finished=False)
    assert res.failure_reason == "truncated"


def test_held_out_split_is_disjoint_and_fixed():
    src = LongHorizonSource(LongHorizonConfig(), TOK)
    train = src.sample(200, seed=1)
    held = src.eval_set(50)
    assert not any(is_held_out(e.episode.facts_text) for e in train)
    assert all(is_held_out(e.episode.facts_text) for e in held)
    assert [e.prompt_id for e in held] == [e.prompt_id for e in src.eval_set(50)]
    assert [e.prompt_id for e in src.sample(5, seed=1)] == [e.prompt_id for e in train[:5]]


@pytest.mark.parametrize(
    "kw,field",
    [({"n_facts": 0}, "n_facts"), ({"min_turns": 0}, "min_turns"), ({"max_turns": 2}, "max_turns")],
)
def test_config_errors_name_the_field(kw, field):
    with pytest.raises(ValueError, match=f"longhorizon.{field}"):
        LongHorizonConfig(**kw)


def test_teacher_replies():
    t = TeacherEngine(ModelConfig(vocab_size=320), TOK, "#", flaw_rate=0.0)
    ctx = TOK.encode("<|bos|><|user|>a=37,b=52<|assistant|>ok<|eos|><|user|>f=18<|assistant|>")
    assert t.respond(ctx) == "ok"
    assert t.respond(ctx + TOK.encode("#")) == "a=37,b=52"
    q = ctx + TOK.encode("ok<|eos|><|user|>b?<|assistant|>")
    assert t.respond(q) == "52"
    flawed = TeacherEngine(ModelConfig(vocab_size=320), TOK, "#", flaw_rate=1.0)
    assert flawed.respond(ctx + TOK.encode("#")) == "a=37"
    lost = TOK.encode("<|bos|><|user|>a=37<|assistant|>ok<|eos|><|user|>b?<|assistant|>")
    assert flawed.respond(lost) == "37"  # the fact is gone: the teacher guesses
