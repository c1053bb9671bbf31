"""Producer columns -> typed tables: the column convention, and bad-record messages."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from observability.records import build_table
from observability.schema import TABLES
from tests.observability.fakes import VOCAB, valid_columns


def tokens(n=6, **over):
    cols = {
        "step": 3,
        "sample_id": np.repeat(np.arange(n // 2) + 10, 2),
        "pos": np.tile(np.arange(2), n // 2),
        "token_id": torch.arange(n),
        "role": "action",
        "loss_mask": torch.ones(n, dtype=torch.bool),
        "rollout_logp": -torch.rand(n, dtype=torch.float64),
        "train_logp": -torch.rand(n).to(torch.bfloat16),
    }
    cols.update(over)
    return cols


def build(table, cols, **kw):
    kw.setdefault("vocab_size", VOCAB)
    return build_table(table, cols, run_id="r", rank=0, **kw)


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_accepts_valid_fakes(name):
    t = build(name, valid_columns(TABLES[name], 5))
    assert t.num_rows == 5 and t.schema.equals(TABLES[name].arrow_schema)
    assert t["run_id"].to_pylist() == ["r"] * 5


def test_inputs_scalars_tensors_and_defaults():
    t = build("tokens", tokens())
    assert t["step"].to_pylist() == [3] * 6  # scalar broadcast
    assert t["train_logp"].type == pa.float32()  # bf16 tensor widened, stored as float32
    assert t["old_logp"].null_count == 6  # absent nullable column -> nulls
    steps = build("steps", {"step": 1, "policy_version": 0, "loss": 0.5, "wall_time": 1.7e9})
    assert steps.num_rows == 1 and steps["rank"].to_pylist() == [0]  # rank filled by the sink
    assert steps["wall_time"][0].value == 1_700_000_000_000_000  # epoch seconds -> microseconds
    topk = build("topk", {"step": 0, "sample_id": [1, 2], "pos": 0, "engine": "train", "k": 2,
                          "indices": torch.tensor([[5, 1], [3, 4]])})  # fmt: skip
    assert topk["indices"].to_pylist() == [[5, 1], [3, 4]]


def test_the_column_convention():
    """(a) arrays / tensors, (b) broadcast scalars, (c) None, (d) masked arrays, (e) str lists and
    arrays, (f) enum strings or codes, (g) 2-D list columns; datetimes and datetime64."""
    from datetime import UTC, datetime

    t = build("tokens", tokens(
        old_logp=None,  # (c) all null
        teacher_logp=np.ma.MaskedArray(-np.ones(6), mask=[0, 1, 0, 0, 0, 1]),  # (d)
        teacher_id=np.array(["t0", "t1", "t0", "t1", "t0", "t1"]),  # (e) an ndarray of str
        mask_reason=torch.tensor([0, 1, 0, 2, 3, 5]),  # (f) codes as a tensor
        role=np.array(["prompt", "action", "action", "action", "prompt", "action"]),  # (f)
    ))  # fmt: skip
    assert t["old_logp"].null_count == 6
    assert t["teacher_logp"].to_pylist() == [-1.0, None, -1.0, -1.0, -1.0, None]
    assert t["teacher_id"].to_pylist()[:2] == ["t0", "t1"]
    assert t["mask_reason"].to_pylist() == [
        "kept",
        "icepop",
        "kept",
        "dis_low",
        "dis_high",
        "stale",
    ]
    assert t["role"].to_pylist()[:2] == ["prompt", "action"]
    topk = {"step": 0, "sample_id": [1, 2, 3], "pos": 0, "engine": np.array([0, 1, 0]), "k": 2}
    indices = np.array([[5, 1], [3, 4], [7, 8]], dtype=np.int64)
    assert build("topk", dict(topk, indices=indices))["indices"].to_pylist() == [
        [5, 1], [3, 4], [7, 8]
    ]  # fmt: skip
    masked = np.ma.MaskedArray(indices, mask=[[0, 0], [1, 1], [0, 1]])  # masked: left out
    assert build("topk", dict(topk, indices=masked))["indices"].to_pylist() == [[5, 1], [], [7]]
    lists = build(
        "topk", dict(topk, indices=[[5, 1], [], [7]], engine=["train", "rollout", "train"])
    )
    assert lists["indices"].to_pylist() == [[5, 1], [], [7]]
    assert lists["engine"].to_pylist() == ["train", "rollout", "train"]  # (f) a list of str
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    syncs = {"sync_id": [0, 1], "policy_version": 1, "phase": ["gather", "ack"]}
    for ts in (when, [when, when], np.array([when.replace(tzinfo=None)] * 2, "datetime64[ns]")):
        got = build("weight_syncs", dict(syncs, ts=ts))["ts"].to_pylist()
        assert got == [when, when]
    cfg = build("runs", {"schema_version": 1, "started_at": when, "updated_at": when,
                         "world_size": 1, "status": "running", "config": {"b": 1, "a": 2}})  # fmt: skip
    assert cfg["config"].to_pylist() == ['{"a": 2, "b": 1}']  # JSON columns take dicts


def test_pyarrow_arrays_are_accepted_too():
    t = build("tokens", tokens(rollout_logp=pa.array([-1.0, None, -1, -1, -1, -1])))
    assert t["rollout_logp"].type == pa.float32() and t["rollout_logp"].null_count == 1


@pytest.mark.parametrize(
    ("over", "column", "message"),
    [
        ({"rollout_logp": np.array([0, -1, np.nan, -1, -1, -1.0])}, "rollout_logp", "not finite at row 2 \\(sample_id 11\\)"),
        ({"train_logp": np.array([0, -1, -1, -1, np.inf, -1.0])}, "train_logp", "not finite at row 4 \\(sample_id 12\\)"),
        ({"rollout_logp": np.array([0, -1, -1, 0.5, -1, -1.0])}, "rollout_logp", "above the maximum 0.0 at row 3 \\(sample_id 11\\)"),
        ({"token_id": np.array([0, 1, 2, 3, VOCAB, 5])}, "token_id", "outside the vocabulary \\[0, 100\\) at row 4 \\(sample_id 12\\)"),
        ({"token_id": np.array([0, -1, 2, 3, 4, 5])}, "token_id", "below the minimum 0 at row 1 \\(sample_id 10\\)"),
        ({"token_id": np.array([0, 1, 2, 3, 4, 2**40])}, "token_id", "at row 5"),
        ({"policy_version_rollout": np.array([0, 0, -3, 0, 0, 0])}, "policy_version_rollout", "below the minimum 0 at row 2 \\(sample_id 11\\)"),
        ({"role": ["action"] * 5 + ["actor"]}, "role", "not one of .* at row 5 \\(sample_id 12\\): value 'actor'"),
        ({"mask_reason": [None, "kept", "clipped", None, None, None]}, "mask_reason", "not one of .* at row 2"),
        ({"loss_mask": [True, None, True, True, True, True]}, "loss_mask", "null in a non-nullable column at row 1"),
    ],
)  # fmt: skip
def test_bad_values_name_table_column_and_sample(over, column, message):
    with pytest.raises(ValueError, match=f"table 'tokens' column '{column}': .*{message}"):
        build("tokens", tokens(**over))


def test_bad_shapes_and_names():
    with pytest.raises(
        ValueError, match=r"table 'tokens': columns have different lengths .*'pos': 5"
    ):
        build("tokens", tokens(pos=np.arange(5)))
    with pytest.raises(ValueError, match=r"table 'tokens': unknown columns \['logp'\]"):
        build("tokens", tokens(logp=np.zeros(6)))
    with pytest.raises(ValueError, match="unknown telemetry table 'token'"):
        build("token", tokens())
    with pytest.raises(ValueError, match="missing required columns \\['sample_id', 'status'\\]"):
        build("samples", {"step": 0})
    with pytest.raises(ValueError, match="'run_id': filled in by the sink"):
        build("tokens", tokens(run_id="x"))
    with pytest.raises(ValueError, match="column 'indices': element below the minimum 0 at row 1"):
        build("topk", {"step": 0, "sample_id": [1, 2], "pos": 0, "engine": "train", "k": 2,
                       "indices": [[1, 2], [3, -4]]})  # fmt: skip


def test_vocab_check_only_when_declared():
    t = build("tokens", tokens(token_id=np.full(6, 10**6)), vocab_size=None)
    assert t["token_id"].to_pylist() == [10**6] * 6


def test_token_sampling_filters_per_token_tables_and_marks_samples():
    ids = np.arange(1000)
    t = build("tokens", {"step": 0, "sample_id": ids, "pos": 0, "token_id": 1, "role": "action",
                         "loss_mask": True}, token_sample_rate=0.25)  # fmt: skip
    s = build("samples", {"step": 0, "sample_id": ids, "status": "trained"}, token_sample_rate=0.25)
    kept = np.asarray(s["tokens_sampled"])
    assert s.num_rows == 1000  # samples stay exact
    np.testing.assert_array_equal(t["sample_id"].to_numpy(), ids[kept])


def test_structural_errors_repeat_and_lengths_name_every_column():
    """Column checks are cached per column set; a failing set must raise every time."""
    for _ in range(2):
        with pytest.raises(ValueError, match=r"unknown columns \['logp'\]"):
            build("tokens", tokens(logp=np.zeros(6)))
    with pytest.raises(ValueError, match=r"different lengths .*'sample_id': 6.*'pos': 4"):
        build("tokens", tokens(pos=[0, 1, 2, 3]))


def test_enum_codes_convert_and_out_of_range_codes_are_rejected():
    """Integer codes index the enum; the conversion's range check is the only enum check they
    get, so it must catch codes on either side."""
    codes = np.array([0, 1, 4, 1, 0, 5], dtype=np.int8)  # kept, icepop, not_action, ..., stale
    t = build("tokens", tokens(mask_reason=codes, role=torch.tensor([1] * 6)))
    assert t["mask_reason"].to_pylist() == [
        "kept",
        "icepop",
        "not_action",
        "icepop",
        "kept",
        "stale",
    ]
    assert t["role"].to_pylist() == ["action"] * 6
    for bad in (7, -1):
        with pytest.raises(ValueError, match=r"column 'mask_reason'.*enum code .* not in \[0, 7\)"):
            build("tokens", tokens(mask_reason=np.array([0, 1, bad, 0, 0, 0])))


@pytest.mark.parametrize("name", [t for t in TABLES if t != "runs"])
def test_joined_batches_convert_to_the_rows_of_the_batches_one_by_one(name):
    from observability.records import check_batch, join, to_table

    spec = TABLES[name]
    batches = [valid_columns(spec, n, seed=n, start_id=10 * n) for n in (3, 1, 4)]
    for i, b in enumerate(batches):  # scalars: one every batch shares, one that differs
        if "step" in b:
            b["step"] = i
        b.update({c.name: "x" for c in spec.columns[-1:] if c.type == pa.string() and not c.enum})
    snaps = [(b, check_batch(name, b)[1]) for b in batches]
    joined = join(snaps)
    assert joined is not None and joined[1] == 8
    whole = to_table(spec, *joined, run_id="r", rank=0)[0].cast(spec.arrow_schema)
    parts = [to_table(spec, b, n, run_id="r", rank=0)[0].cast(spec.arrow_schema) for b, n in snaps]
    assert whole.to_pylist() == [row for p in parts for row in p.to_pylist()]
    fewer = dict(list(batches[2].items())[1:])  # another column set: converted one by one
    assert join([(batches[0], 3), (fewer, 4)]) is None
