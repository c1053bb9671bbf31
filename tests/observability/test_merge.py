"""Joining queued batches: the writer's one conversion equals converting each batch, for every table."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from observability.merge import merge_batches, snapshot
from observability.records import build_table
from observability.schema import TABLES
from tests.observability.fakes import VOCAB, valid_columns

NAMES = [n for n in TABLES if n != "runs"]


def build(name, cols):
    return build_table(name, cols, run_id="r", rank=0, vocab_size=VOCAB)


@pytest.mark.parametrize("name", NAMES)
def test_merged_conversion_equals_one_by_one(name):
    spec = TABLES[name]
    batches = [
        snapshot(name, valid_columns(spec, n, seed=i, start_id=100 * i))
        for i, n in enumerate((3, 1, 5))
    ]
    merged = merge_batches(spec, batches)
    assert merged is not None
    one_by_one = pa.concat_tables([build(name, b) for b in batches])
    assert build(name, merged).equals(one_by_one)


def test_tensors_and_arrow_arrays_join():
    spec = TABLES["tokens"]
    batches = []
    for i in range(2):
        cols = valid_columns(spec, 4, seed=i, start_id=4 * i)
        cols["train_logp"] = torch.from_numpy(cols["train_logp"]).to(torch.bfloat16)
        cols["rollout_logp"] = pa.array(cols["rollout_logp"])
        batches.append(snapshot("tokens", cols))
    merged = merge_batches(spec, batches)
    assert merged["train_logp"].dtype == np.float32 and len(merged["rollout_logp"]) == 8
    assert build("tokens", merged).equals(pa.concat_tables([build("tokens", b) for b in batches]))


def test_batches_that_cannot_join_exactly_are_left_alone():
    spec = TABLES["tokens"]
    a = snapshot("tokens", valid_columns(spec, 2))
    b = snapshot("tokens", valid_columns(spec, 2, start_id=2))
    assert merge_batches(spec, [a, dict(b, step=7)]) is None  # broadcast scalar
    assert merge_batches(spec, [a, {k: v for k, v in b.items() if k != "entropy"}]) is None
    assert merge_batches(spec, [a, dict(b, pos=b["pos"].astype(np.int16))]) is None  # dtype
    assert merge_batches(spec, [a, dict(b, pos=list(b["pos"]))]) is None  # kind
    assert merge_batches(spec, [a]) is a


def test_scalars_join_as_one_scalar_or_per_batch_lists():
    """A run constant given as a scalar stays one scalar (broadcast once); scalars that differ
    between batches become per-batch lists; both convert to the rows of the batches one by one."""
    spec = TABLES["samples"]
    batches = []
    for i, n in enumerate((2, 3)):
        cols = valid_columns(spec, n, seed=i, start_id=10 * i)
        cols.update(engine="rollout", tokenizer_rev="rev", teacher_id=None, domain=f"d{i}")
        batches.append(snapshot("samples", cols))
    merged = merge_batches(spec, batches)
    assert merged["engine"] == "rollout" and merged["teacher_id"] is None
    assert merged["domain"] == ["d0", "d0", "d1", "d1", "d1"]
    one_by_one = pa.concat_tables([build("samples", b) for b in batches])
    assert build("samples", merged).equals(one_by_one)
    steps = TABLES["steps"]
    rows = [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.5}]  # one-row batches of scalars
    assert merge_batches(steps, rows) == {"step": [1, 2], "loss": 0.5}
    assert merge_batches(steps, [rows[0], dict(rows[0])]) is None  # the length would be lost
    a, b = (snapshot("samples", valid_columns(spec, 2, start_id=s)) for s in (0, 2))
    assert merge_batches(spec, [dict(a, engine="rollout"), b]) is None  # a scalar next to a list


def test_snapshot_copies_what_the_caller_could_mutate():
    t = torch.arange(3, dtype=torch.int64)
    cols = {"pos": np.arange(3), "token_id": t, "role": ["prompt"] * 3, "step": 1}
    snap = snapshot("tokens", cols)
    cols["pos"][:] = 9
    t.fill_(9)
    cols["role"][0] = "padding"
    assert snap["pos"].tolist() == [0, 1, 2] and snap["token_id"].tolist() == [0, 1, 2]
    assert snap["role"][0] == "prompt" and snap["step"] == 1
    with pytest.raises(ValueError, match="column 'token_id': tensor on meta"):
        snapshot("tokens", {"token_id": torch.zeros(2, device="meta")})
