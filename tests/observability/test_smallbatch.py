"""The small-batch path (``observability.smallbatch``) against the general path.

A batch the screen accepts must come out exactly as ``convert.to_arrow`` makes it, column by
column, for every table; a batch with any value the general path would reject must be refused
by the screen (None), so the canonical error — naming table, column and row — still raises.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from observability.convert import to_arrow
from observability.records import build_table
from observability.schema import TABLES
from observability.smallbatch import SMALL_ROWS, screen_small
from tests.observability.fakes import VOCAB, valid_columns


def python_columns(spec, n: int, seed: int = 0) -> dict:
    """``valid_columns`` as plain Python values (what the loop's small producers hand over)."""
    out = {}
    for name, values in valid_columns(spec, n, seed=seed).items():
        if isinstance(values, np.ndarray):
            values = values.tolist()
        else:
            values = [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
            values = [
                [e if isinstance(e, str) else int(e) for e in v] if isinstance(v, list) else v
                for v in values
            ]
        out[name] = values
    return out


@pytest.mark.parametrize("table", sorted(TABLES))
@pytest.mark.parametrize("n", [1, 7, SMALL_ROWS])
def test_accepted_batches_equal_the_general_path(table, n):
    spec = TABLES[table]
    cols = python_columns(spec, n, seed=n)
    fast = screen_small(spec, cols, n, VOCAB)
    assert fast is not None, f"{table}: a valid small batch of Python values took the slow path"
    for name, values in cols.items():
        slow = to_arrow(values, spec.column(name), n, name)
        assert fast[name].type == spec.column(name).type
        assert fast[name].equals(slow), (table, name, fast[name], slow)


def test_numpy_and_torch_columns_and_scalars_are_accepted():
    torch = pytest.importorskip("torch")
    spec = TABLES["steps"]
    cols = python_columns(spec, 3)
    cols["loss"] = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    cols["grad_norm"] = torch.tensor([1.0, 2.0, 3.0])
    cols["lr"] = 3e-5  # scalar, broadcast
    fast = screen_small(spec, cols, 3, VOCAB)
    assert fast is not None
    for name in ("loss", "grad_norm", "lr"):
        assert fast[name].equals(to_arrow(cols[name], spec.column(name), 3, name))


@pytest.mark.parametrize(
    ("table", "column", "bad"),
    [
        ("steps", "step", -1),  # below the minimum
        ("steps", "step", None),  # null in a non-nullable column
        ("steps", "step", 1.5),  # a float in an integer column
        ("steps", "step", 2**70),  # overflow
        ("steps", "masked_fraction", 1.5),  # above the maximum
        ("steps", "masked_fraction", -0.5),  # below the minimum (NaN would pass: no finite rule)
        ("tokens", "train_logp", math.nan),
        ("weight_syncs", "phase", "gathr"),  # not an enum value
        ("weight_syncs", "ts", math.nan),  # epoch NaN -> null in a non-nullable column
        ("tokens", "token_id", VOCAB),  # outside the vocabulary
        ("tokens", "rollout_logp", math.inf),  # not finite
        ("tokens", "rollout_logp", 1e39),  # rounds to inf in float32
        ("tokens", "rollout_logp", "x"),  # a string in a numeric column
    ],
)
def test_any_bad_value_goes_to_the_general_path_which_raises(table, column, bad):
    spec = TABLES[table]
    cols = python_columns(spec, 4)
    cols[column] = [*cols[column][:3], bad]
    assert screen_small(spec, cols, 4, VOCAB) is None
    with pytest.raises(ValueError, match=f"telemetry table '{table}'"):
        build_table(table, cols, run_id="r", rank=0, vocab_size=VOCAB)


def test_large_batches_and_pyarrow_inputs_take_the_general_path():
    spec = TABLES["steps"]
    n = SMALL_ROWS + 1
    assert screen_small(spec, python_columns(spec, n), n, VOCAB) is None
    cols = python_columns(spec, 2)
    cols["loss"] = pa.array([1.0, 2.0])
    assert screen_small(spec, cols, 2, VOCAB) is None


def test_epoch_seconds_round_like_the_general_path():
    spec = TABLES["weight_syncs"]
    ts = [1.0000005, 1.0000015, 1_700_000_000.123456789, 0.0, 1e-7]
    cols = python_columns(spec, len(ts))
    cols["ts"] = ts
    fast = screen_small(spec, cols, len(ts), VOCAB)
    assert fast is not None
    assert fast["ts"].equals(to_arrow(np.array(ts), spec.column("ts"), len(ts), "ts"))
    cols["ts"] = [datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)] * len(ts)
    fast = screen_small(spec, cols, len(ts), VOCAB)
    assert fast["ts"][0].as_py() == cols["ts"][0]
