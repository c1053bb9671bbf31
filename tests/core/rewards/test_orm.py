"""The outcome reward model: it learns a labelled rule, round-trips, refuses another tokenizer."""

from __future__ import annotations

import json

import pytest
import torch

from core.rewards.orm import OrmArch, load_orm, save_orm, train_orm
from core.teachers.compat import TeacherIncompatible

STUDENT = {"tokenizer_rev": "t" * 64, "vocab_hash": "v" * 64, "chat_template_rev": "c" * 64}


def _examples(n, seed):
    # label: the sequence contains token 7 — a rule a tiny encoder learns in a few dozen steps
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(10, 40, (int(torch.randint(4, 9, (1,), generator=g)),), generator=g)
        hit = bool(torch.rand(1, generator=g) < 0.5)
        if hit:
            ids[int(torch.randint(len(ids), (1,), generator=g))] = 7
        out.append(([1, *ids.tolist()], hit))
    return out


# A learning outcome, measured with data and init seeds 0, 1, 2, native AVX2 kernels and
# ATEN_CPU_CAPABILITY=default: held-out accuracy 1.0 every time, base rate 0.600-0.625.
@pytest.mark.float_sensitive
def test_learns_a_rule_and_round_trips(tmp_path):
    arch = OrmArch(vocab_size=64, dim=32, layers=1, heads=2, ffn=64, max_len=16)
    model, stats = train_orm(_examples(400, 0), arch=arch, pad_id=0, steps=150, lr=3e-3)
    assert stats["heldout_accuracy"] >= 0.9 > stats["heldout_base_rate"]
    save_orm(tmp_path / "orm", model, {**STUDENT})
    back = load_orm(tmp_path / "orm", **STUDENT, vocab_size=64)
    seqs = [e[0] for e in _examples(8, 1)]
    torch.testing.assert_close(back.score(seqs, pad_id=0), model.score(seqs, pad_id=0))


def test_refuses_another_tokenizer_and_a_tampered_file(tmp_path):
    arch = OrmArch(vocab_size=64, dim=16, layers=1, heads=2, ffn=32, max_len=16)
    model, _ = train_orm(_examples(40, 0), arch=arch, pad_id=0, steps=2)
    save_orm(tmp_path / "orm", model, {**STUDENT})
    with pytest.raises(TeacherIncompatible, match="tokenizer_rev"):
        load_orm(tmp_path / "orm", **{**STUDENT, "tokenizer_rev": "x" * 64}, vocab_size=64)
    with pytest.raises(TeacherIncompatible, match="vocab_size 64 != student's 320"):
        load_orm(tmp_path / "orm", **STUDENT, vocab_size=320)
    meta = json.loads((tmp_path / "orm" / "config.json").read_text())
    meta["weights_sha256"] = "0" * 64
    (tmp_path / "orm" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="sha256"):
        load_orm(tmp_path / "orm", **STUDENT, vocab_size=64)
