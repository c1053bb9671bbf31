"""Parts: names and the cover rule, the live merge (tiers, size cap, readers see each row once)
and pruning of covered parts."""

import pyarrow.parquet as pq

from observability import DuckDBTelemetry, TelemetryConfig, open_run, refresh
from observability.parts import FANIN, Merger, PartWriter, _split, list_parts, prune
from observability.records import build_table
from observability.schema import TABLES, table_spec
from tests.observability.fakes import valid_columns

CFG = TelemetryConfig(flush_seconds=60, compact_on_close=False)


def test_a_cover_hides_exactly_the_parts_of_its_writer_in_its_range():
    names = [
        "part-r0000-1aa-0000001.parquet",
        "part-r0000-1aa-0000003.parquet",
        "part-r0000-1aa-0000001-0000003.parquet",  # covers 1 and 3 of writer 1aa
        "part-r0000-1aa-0000004.parquet",
        "part-r0001-1aa-0000002.parquet",  # another rank: not covered
        "part-r0000-2bb-0000002.parquet",  # another writer: not covered
        "part-r0000-1aa-0000001-0000009.parquet",  # a later, larger cover hides the first one
    ]
    visible, covered = _split(names)
    assert visible == [
        "part-r0000-1aa-0000001-0000009.parquet",
        "part-r0000-2bb-0000002.parquet",
        "part-r0001-1aa-0000002.parquet",
    ]
    assert dict(covered) == {n: "part-r0000-1aa-0000001-0000009.parquet" for n in names[:4]}


def rows(run, table="samples"):
    return sum(pq.read_metadata(p).num_rows for p in list_parts(run, table))


def test_flushes_merge_in_tiers_and_readers_count_every_row_once(tmp_path):
    run = tmp_path / "run"
    tel = DuckDBTelemetry(run, config=CFG)
    con = open_run(run)
    for i in range(FANIN * FANIN + 3):  # 67 flushes: one level-2 part, three level-0 parts
        tel.emit("samples", valid_columns(TABLES["samples"], 2, start_id=2 * i))
        tel.flush()
        refresh(con)
        assert con.execute(
            "SELECT count(*), count(DISTINCT sample_id) FROM samples"
        ).fetchall() == [(2 * (i + 1), 2 * (i + 1))]
    names = [p.name for p in list_parts(run, "samples")]
    assert len(names) == 4 and names[0].count("-") == 4  # part-r0000-<writer>-<first>-<last>
    assert rows(run) == 2 * (FANIN * FANIN + 3)
    assert len(list_parts(run, "samples", covered=True)) == FANIN * FANIN + FANIN  # not pruned yet
    tel.close()


def test_merged_parts_stop_at_max_rows(tmp_path):
    spec = table_spec("samples")
    writer = PartWriter(tmp_path, rank=0)
    merger = Merger(writer, max_rows=30)
    for i in range(3 * FANIN):  # parts of 4 rows: 8 of them (32) exceed 30
        data = build_table("samples", valid_columns(spec, 4, start_id=4 * i), run_id="r", rank=0)
        path, seq = writer.write(data, spec)
        merger.add("samples", path, seq, data.num_rows)
    sizes = sorted(pq.read_metadata(p).num_rows for p in list_parts(tmp_path, "samples"))
    assert sum(sizes) == 3 * FANIN * 4 and max(sizes) <= 30
    assert len(sizes) == 6  # each group of 8 packed as 28 rows + 4 rows


def test_no_merge_after_a_compaction_and_prune_waits_for_the_grace(tmp_path):
    from observability.compact import compact

    run = tmp_path / "run"
    tel = DuckDBTelemetry(run, config=CFG)
    for i in range(FANIN):
        tel.emit("samples", valid_columns(TABLES["samples"], 1, start_id=i))
        tel.flush()
    assert len(list_parts(run, "samples")) == 1
    old = open_run(run)  # a snapshot over the merged part
    covered = list_parts(run, "samples", covered=True)
    assert prune(run) == 0 and all(p.exists() for p in covered)  # younger than PRUNE_AFTER_S
    assert prune(run, older_than=0) == FANIN and not any(p.exists() for p in covered)
    assert old.execute("SELECT count(*) FROM samples").fetchall() == [(FANIN,)]
    compact(run)  # a manifest now names the parts in telemetry.duckdb: they must stay as they are
    for i in range(FANIN):
        tel.emit("samples", valid_columns(TABLES["samples"], 1, start_id=100 + i))
        tel.flush()
    assert len(list_parts(run, "samples")) == 1 + FANIN
    tel.close()
    assert open_run(run).execute("SELECT count(*) FROM samples").fetchall() == [(2 * FANIN,)]
