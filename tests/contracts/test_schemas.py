"""pandera models built from the column rules (``observability.rules``), and streamed part-by-part
validation."""

import polars as pl
import pytest
from pandera.errors import SchemaErrors

from contracts.schemas import MODELS, model_for, polars_dtype
from contracts.validate import validate_table
from observability import DuckDBTelemetry, TelemetryConfig
from observability.parts import PartWriter, list_parts
from observability.records import build_table
from observability.rules import column_rules
from observability.schema import TABLES, table_spec
from tests.observability.fakes import VOCAB, valid_columns


def frame(table: str, n: int = 6, **overrides) -> pl.DataFrame:
    """A valid n-row polars frame of ``table`` built by the store's own record builder."""
    cols = valid_columns(TABLES[table], n)
    arrow = build_table(table, cols, run_id="r", rank=0, vocab_size=VOCAB)
    df = pl.from_arrow(arrow)
    for column, (row, value) in overrides.items():
        dtype = df.schema[column]
        df = df.with_columns(
            pl.when(pl.int_range(pl.len()) == row)
            .then(pl.lit(value, dtype=dtype))
            .otherwise(pl.col(column))
            .alias(column)
        )
    return df


def failures(table: str, df: pl.DataFrame, vocab_size: int | None = VOCAB) -> set[tuple]:
    """(column, check, row index) of every failure case."""
    try:
        model_for(table, vocab_size).validate(df, lazy=True)
    except SchemaErrors as e:
        return {
            (r["column"], r["check"], r["index"]) for r in e.failure_cases.iter_rows(named=True)
        }
    return set()


@pytest.mark.parametrize("table", list(TABLES))
def test_models_mirror_the_schema_and_accept_valid_rows(table):
    spec = table_spec(table)
    schema = MODELS[table].to_schema()
    assert list(schema.columns) == list(spec.column_names)
    assert schema.strict is True
    for col in spec.columns:
        assert schema.columns[col.name].nullable == col.nullable
        checks = {c.name for c in schema.columns[col.name].checks}
        assert checks == {r.name for r in column_rules(col) if r.kind != "not_null"}
    assert failures(table, frame(table)) == set()


def test_dtype_mapping_keeps_units_zones_and_list_elements():
    spec = table_spec("memory_events")
    assert polars_dtype(spec.column("ts").type) == pl.Datetime("us", "UTC")
    assert polars_dtype(spec.column("logical_shape").type) == pl.List(pl.Int64)
    assert polars_dtype(table_spec("tokens").column("rollout_logp").type) == pl.Float32


def test_each_column_rule_catches_exactly_its_row():
    # One bad cell per rule, each in its own row, so every failure names its row.
    df = frame(
        "tokens",
        token_id=(0, VOCAB),  # below_vocab: VOCAB itself is out (ids are < vocab_size)
        role=(1, "assistant"),  # enum
        train_logp=(2, 0.5),  # max 0 (log-probs are <= 0)
        rollout_logp=(3, float("-inf")),  # finite (-inf is <= 0, so only this rule fires)
        pos=(4, -1),  # min 0
    )
    assert failures("tokens", df) == {
        ("token_id", "< vocab_size 100", 0),
        ("role", "isin(['prompt', 'action', 'observation', 'summary', 'padding', 'tail'])", 1),
        ("train_logp", "<= 0.0", 2),
        ("rollout_logp", "finite", 3),
        ("pos", ">= 0", 4),
    }


def test_vocab_rule_only_when_the_run_declares_a_vocabulary():
    df = frame("tokens", token_id=(0, 10_000))
    assert failures("tokens", df, vocab_size=None) == set()
    assert ("token_id", "< vocab_size 100", 0) in failures("tokens", df)


def test_nan_passes_float_bounds_but_not_finite():
    # The writer's rule: NaN passes min/max (steps with no loss tokens have NaN means);
    # only `finite` columns (log-probs) reject it.
    steps = frame("steps", masked_fraction=(0, float("nan")), mismatch_abs_mean=(1, float("nan")))
    assert failures("steps", steps) == set()
    steps = frame("steps", masked_fraction=(0, 1.5))
    assert failures("steps", steps) == {("masked_fraction", "<= 1.0", 0)}
    tokens = frame("tokens", old_logp=(5, float("nan")))
    assert failures("tokens", tokens) == {("old_logp", "finite", 5)}


def test_nulls_strictness_and_list_elements():
    df = frame("tokens", sample_id=(1, None))
    assert ("sample_id", "not_nullable", 1) in failures("tokens", df)
    extra = frame("tokens").with_columns(pl.lit(1).alias("surprise"))
    assert any(c == "surprise" or k == "column_in_schema" for c, k, _ in failures("tokens", extra))
    topk = frame("topk", indices=(2, [3, -1]))
    assert failures("topk", topk) == {("indices", "elements >= 0", 2)}


def write_parts(run_dir, table, batches):
    """One part per batch, in order (one PartWriter: part names sort by sequence number)."""
    writer = PartWriter(run_dir, rank=0)
    for cols in batches:
        writer.write(build_table(table, cols, run_id="r", rank=0), table_spec(table))


def test_streamed_validation_locates_failures_by_part_row_and_sample(tmp_path):
    run = tmp_path / "run"
    sizes = {0: 50, 50: 150, 200: 50}  # first sample id -> rows: three parts
    write_parts(
        run, "samples", [valid_columns(TABLES["samples"], n, start_id=s) for s, n in sizes.items()]
    )
    part = list_parts(run, "samples")[1]
    df = pl.read_parquet(part).with_columns(
        pl.when(pl.col("sample_id") == 150)
        .then(-3)
        .otherwise(pl.col("staleness"))
        .alias("staleness")
    )
    df.write_parquet(part)
    # batch_rows=64: the 150-row part is read in slices [0, 64), [64, 128), [128, 150) and
    # small pieces share pandera calls, so the row must be mapped back through both.
    found = validate_table(run, "samples", batch_rows=64)
    assert (found.n_rows, found.n_parts, found.n_failures) == (250, 3, 1)
    (example,) = found.examples
    assert example["sample_id"] == 150 and example["row"] == 100  # 150 - 50: row 100 of part 2
    assert example["part"] == part.name and example["column"] == "staleness"
    assert example["value"] == "-3"


def test_schema_evolution_missing_nullable_ok_missing_required_fails(tmp_path):
    run = tmp_path / "run"
    cols = valid_columns(TABLES["tokens"], 8)
    write_parts(run, "tokens", [cols])
    part = list_parts(run, "tokens")[0]
    pl.read_parquet(part).drop("teacher_id").write_parquet(part)  # an older writer
    assert validate_table(run, "tokens").n_failures == 0
    pl.read_parquet(part).drop("loss_mask").write_parquet(part)
    found = validate_table(run, "tokens")
    assert found.n_failures == 1
    assert found.examples[0]["part"] == part.name
    assert found.examples[0]["check"] == "column_in_dataframe"
    assert found.examples[0]["value"] == "loss_mask"


def test_a_part_with_a_wrong_dtype_fails_alone(tmp_path):
    run = tmp_path / "run"
    write_parts(run, "samples", [valid_columns(TABLES["samples"], 10, start_id=s) for s in (0, 10)])
    part = list_parts(run, "samples")[0]
    df = pl.read_parquet(part)
    df.with_columns(pl.col("reward").cast(pl.Float32)).write_parquet(part)
    found = validate_table(run, "samples")
    assert found.n_rows == 20
    assert [(e["part"], e["column"]) for e in found.examples] == [(part.name, "reward")]


def test_validation_of_a_real_writer_run_is_clean(tmp_path):
    tel = DuckDBTelemetry(
        tmp_path / "run",
        run_info={"vocab_size": VOCAB},
        config=TelemetryConfig(compact_on_close=False),
    )
    for table in ("samples", "tokens", "steps", "memory_events"):
        tel.emit(table, valid_columns(TABLES[table], 20))
    tel.close()
    for table in TABLES:
        found = validate_table(tmp_path / "run", table, vocab_size=VOCAB)
        assert found.n_failures == 0, found.examples
        assert found.n_rows == {
            "samples": 20,
            "tokens": 20,
            "steps": 20,
            "memory_events": 20,
            "runs": 2,
        }.get(table, 0)
