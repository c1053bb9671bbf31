"""``PendingTables``: thresholds, one part per table per flush, a bad batch rejected alone."""

import numpy as np

from observability import open_run
from observability.batcher import PendingTables
from observability.parts import PartWriter, list_parts
from observability.schema import TABLES
from tests.observability.fakes import VOCAB, valid_columns


def pending(tmp_path, **kw):
    rejected, errors = [], []
    tables = PendingTables(
        PartWriter(tmp_path, rank=0),
        run_id="run",
        rank=0,
        vocab_size=VOCAB,
        token_sample_rate=1.0,
        flush_rows=kw.get("flush_rows", 10),
        flush_seconds=kw.get("flush_seconds", 2.0),
        on_reject=rejected.append,
        on_error=errors.append,
    )
    return tables, rejected, errors


def test_thresholds_by_rows_and_age(tmp_path):
    tables, _, _ = pending(tmp_path, flush_rows=10, flush_seconds=2.0)
    assert tables.seconds_to_due() is None and not tables.due()
    tables.add("samples", valid_columns(TABLES["samples"], 6), 6, t=100.0)
    tables.add("tokens", valid_columns(TABLES["tokens"], 4), 4, t=101.0)
    assert tables.full_tables() == [] and tables.seconds_to_due(now=101.5) == 0.5
    assert not tables.due(now=101.9) and tables.due(now=102.0)  # the oldest batch's age counts
    tables.add("samples", valid_columns(TABLES["samples"], 6, start_id=6), 6, t=101.2)
    assert tables.full_tables() == ["samples"]


def test_a_flush_writes_one_part_per_table_and_rejects_only_the_bad_batch(tmp_path):
    tables, rejected, errors = pending(tmp_path)
    good = valid_columns(TABLES["tokens"], 4)
    bad = dict(good, train_logp=np.array([-1, np.nan, -1, -1], dtype=np.float32))
    bad["sample_id"] = np.arange(4, 8)
    for i, batch in enumerate([good, bad, valid_columns(TABLES["tokens"], 4, start_id=8)]):
        tables.add("tokens", batch, 4, t=float(i))
    tables.add("samples", valid_columns(TABLES["samples"], 3), 3)
    tables.write_all()
    assert tables.oldest is None and tables.pending == {} and errors == []
    assert len(rejected) == 1 and "not finite at row 1 (sample_id 5)" in str(rejected[0])
    assert [len(list_parts(tmp_path, t)) for t in ("tokens", "samples")] == [1, 1]
    con = open_run(tmp_path)
    assert con.execute(
        "SELECT count(*), min(sample_id), max(sample_id) FROM tokens"
    ).fetchall() == [(8, 0, 11)]
