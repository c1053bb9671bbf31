"""Gate benchmark: a synthetic 10 M-token run written with the real writer, then gated.

Sections (each in a fresh subprocess, so peak RSS is the section's own):
``gate``: ``run_gate`` over the whole run (schemas + every check), wall time and peak RSS
(goals: <= 5 s on 2 cores, <= 2 GB). ``validate``: the streamed polars/pandera validation of
``tokens`` vs one DuckDB SQL pass over the same parts counting the same rules
(``observability.rules``, rendered as SQL; goal >= 0.5x its rows/s).
Usage: ``python benchmarks/gate.py [--tokens 10_000_000] [--dir DIR] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

VOCAB = 32_000
SAMPLE_LEN, PROMPT_LEN = 256, 64
SAMPLES_PER_STEP = 1024
PHASES = ("gather", "reshard", "send", "switch", "ack")


def step_columns(step: int, rng: np.random.Generator) -> dict[str, dict]:
    """One GRPO step's rows: samples of 256 tokens (64 prompt), fp32 log-probs, IcePop beta 2."""
    n, rows = SAMPLES_PER_STEP, SAMPLES_PER_STEP * SAMPLE_LEN
    sample_ids = step * n + np.arange(n)
    pos = np.tile(np.arange(SAMPLE_LEN, dtype=np.int32), n)
    act = pos >= PROMPT_LEN
    rollout = -rng.exponential(1.0, rows).astype(np.float32)
    train = np.minimum(rollout + rng.normal(0, 0.02, rows).astype(np.float32), 0).astype(np.float32)
    ratio = np.exp(train - rollout)  # float32, as the trainer computes it
    kept = (ratio >= 0.5) & (ratio <= 2.0)
    reason = np.where(act, np.where(kept, "kept", "icepop"), "not_action")
    token_id = rng.integers(0, VOCAB, rows, dtype=np.int32)
    delta = np.abs(train - rollout)[act]
    tokens = {
        "step": step,
        "sample_id": np.repeat(sample_ids, SAMPLE_LEN),
        "pos": pos,
        "token_id": token_id,
        "train_token_id": token_id,
        "role": np.where(act, "action", "prompt"),
        "loss_mask": act,
        "rollout_logp": _on(rollout, act),
        "train_logp": _on(train, act),
        "old_logp": _on(train, act),
        "ratio": _on(ratio, act),
        "trust_mask": act & kept,
        "mask_reason": reason,
        "advantage": _on(np.repeat(rng.normal(size=n).astype(np.float32), SAMPLE_LEN), act),
        "entropy": _on(rng.exponential(1.0, rows).astype(np.float32), act),
        "prefix_hash": rng.integers(0, 2**62, rows),
        "policy_version_rollout": step,
    }
    samples = {
        "sample_id": sample_ids,
        "step": step,
        "group_id": sample_ids // 8,
        "policy_version_rollout": step,
        "policy_version_train": step,
        "staleness": 0,
        "reward": rng.random(n),
        "n_prompt_tokens": PROMPT_LEN,
        "n_response_tokens": SAMPLE_LEN - PROMPT_LEN,
        "status": "trained",
        "tokenizer_rev": "tok-1",
        "chat_template_rev": "tpl-1",
        "sampling": '{"temperature": 1.0}',
    }
    steps = {
        "step": [step],
        "policy_version": [step + 1],
        "n_tokens": [rows],
        "n_loss_tokens": [int(act.sum())],
        "masked_fraction": [1 - kept[act].mean()],
        "mismatch_abs_mean": [float(delta.mean())],
        "mismatch_abs_p99": [float(np.quantile(delta, 0.99))],
    }
    syncs = {
        "sync_id": step,
        "policy_version": step,
        "phase": list(PHASES),
        "ts": 1.8e9 + step + np.arange(len(PHASES)) * 1e-3,
        "bytes": 1 << 20,
    }
    return {"tokens": tokens, "samples": samples, "steps": steps, "weight_syncs": syncs}


def _on(x: np.ndarray, mask: np.ndarray) -> np.ma.MaskedArray:
    return np.ma.MaskedArray(x, mask=~mask)  # null where the token is no action


def write_run(run_dir: Path, n_tokens: int) -> float:
    """Write the synthetic run through ``DuckDBTelemetry``; returns seconds (incl. compaction)."""
    from observability import DuckDBTelemetry

    info = {
        "vocab_size": VOCAB,
        "icepop_beta": 2.0,
        "staleness_limit": 4,
        "tokenizer_rev": "tok-1",
        "chat_template_rev": "tpl-1",
        "algorithm": "grpo",
        "config": {"algorithm": {"trust_rule": "icepop"}},
    }
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    tel = DuckDBTelemetry(run_dir, run_info=info)
    for step in range(max(1, n_tokens // (SAMPLES_PER_STEP * SAMPLE_LEN))):
        for table, columns in step_columns(step, rng).items():
            tel.emit(table, columns)
        tel.step_end(step)
    tel.close()
    return time.perf_counter() - t0


def _peak_mb() -> float:
    """This process's peak RSS (VmHWM; ru_maxrss would carry the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    """User + system CPU seconds of this process (all threads): contention-free cost."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def section_gate(run_dir: Path) -> dict:
    from contracts import run_gate

    t0, c0 = time.perf_counter(), _cpu_s()
    gate = run_gate(run_dir, record=False)
    seconds, cpu = time.perf_counter() - t0, _cpu_s() - c0
    slow = sorted(gate.results, key=lambda r: -r.seconds)[:5]
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "peak_mb": _peak_mb(),
        "passed": gate.passed,
        "counts": dict(gate.counts),
        "slowest": {r.id: round(r.seconds, 3) for r in slow},
    }


def _sql_predicates(vocab: int) -> list[str]:
    """The tokens table's column rules as SQL violation predicates (``observability.rules``: the
    same rules the pandera models and the writer apply)."""
    from observability.rules import table_rules

    return [r.violation_sql() for r in table_rules("tokens", vocab)]


def section_validate(run_dir: Path) -> dict:
    import duckdb

    from contracts.validate import validate_table
    from observability.compact import good_parts, parquet_scan

    out = {}
    t0, c0 = time.perf_counter(), _cpu_s()
    found = validate_table(run_dir, "tokens", vocab_size=VOCAB)
    out["polars_s"], out["polars_cpu_s"] = time.perf_counter() - t0, _cpu_s() - c0
    out["rows"], out["failures"] = found.n_rows, found.n_failures
    parts = [p for p, _ in good_parts(run_dir, "tokens")]
    preds = _sql_predicates(VOCAB)
    sql = (
        f"SELECT count(*), {', '.join(f'count(*) FILTER (WHERE {p})' for p in preds)} "
        f"FROM {parquet_scan(parts)}"
    )
    con = duckdb.connect()
    t0, c0 = time.perf_counter(), _cpu_s()
    counts = con.execute(sql).fetchall()[0]
    out["duckdb_s"], out["duckdb_cpu_s"] = time.perf_counter() - t0, _cpu_s() - c0
    out["duckdb_predicates"], out["duckdb_violations"] = len(preds), sum(counts[1:])
    out["peak_mb"] = _peak_mb()
    return out


def _subprocess(section: str, run_dir: Path, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--section",
        section,
        "--dir",
        str(run_dir),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=10_000_000)
    p.add_argument("--dir", default=None, help="run directory (reused if it exists)")
    p.add_argument("--keep", action="store_true", help="keep the synthetic run")
    p.add_argument("--section", choices=["gate", "validate"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.section:
        run = Path(args.dir)
        result = section_gate(run) if args.section == "gate" else section_validate(run)
        print(json.dumps(result))
        return
    root = Path(tempfile.mkdtemp(prefix="gate-bench-")) if args.dir is None else None
    run = Path(args.dir) if args.dir else root / "synthetic"
    if not (run / "telemetry").is_dir():
        print(f"writing {args.tokens:,} tokens to {run} ...", flush=True)
        print(f"  writer: {write_run(run, args.tokens):.1f} s (incl. compaction)")
    g = _subprocess("gate", run, args)
    print(
        f"gate: {g['seconds']:.2f} s wall, {g['cpu_s']:.2f} s CPU, peak RSS {g['peak_mb']:.0f} MB, "
        f"passed={g['passed']} "
        f"{g['counts']}\n  slowest checks: {g['slowest']}"
    )
    v = _subprocess("validate", run, args)
    rows = v["rows"]
    print(
        f"tokens validation over {rows:,} rows ({v['failures']} failures); M rows/s "
        "wall (under this machine's load) and per CPU-second (contention-free):"
    )
    lines = [
        ("polars/pandera streamed", rows, v["polars_s"], v["polars_cpu_s"], ""),
        (
            "DuckDB one SQL pass",
            rows,
            v["duckdb_s"],
            v["duckdb_cpu_s"],
            f"{v['duckdb_predicates']} predicates",
        ),
    ]
    for name, n, wall, cpu, note in lines:
        print(f"  {name:24s} {n / wall / 1e6:6.1f} wall  {n / cpu / 1e6:6.1f} per CPU-s  {note}")
    print(
        f"  polars / DuckDB: {v['duckdb_s'] / v['polars_s']:.2f}x wall, "
        f"{v['duckdb_cpu_s'] / v['polars_cpu_s']:.2f}x per CPU-s (goal >= 0.5x); "
        f"section peak RSS {v['peak_mb']:.0f} MB"
    )
    if root is not None and not args.keep:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
