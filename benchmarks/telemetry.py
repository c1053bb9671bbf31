"""Telemetry sink benchmarks, measured side by side in one run; each ratio on one clock.

Section ``glm``: a GLM-sized step, 1,048,576 ``tokens`` rows (1,024 samples x 1,024 tokens, every
column filled, log-probs null off the actions) handed to ``DuckDBTelemetry``, against a raw
``pyarrow.parquet.write_table`` of the same rows with the same file settings, in rounds whose
phase order alternates. Every phase is read on three clocks (wall, process CPU, the calling
thread's CPU) and each ratio divides one clock by the same clock: ``emit`` / ``write_table`` on
the training thread (wall / wall and thread CPU / thread CPU; goal <= 0.1x), the writer's ingest
(emit .. flush of ``--steps`` steps) as a multiple of raw throughput (wall / wall and process CPU
/ process CPU; goal >= 0.8x); each step readable by ``open_run`` within ``flush_seconds`` + 1 s
of ``step_end``. Section ``tiny`` (``telemetry_tiny.py``): step time, wall and CPU, of the tiny
training config with ``--telemetry duckdb`` against training without telemetry, interleaved
fresh processes, and the live lag as a separate reader process polling like the dashboard sees
it. Section ``live``: a synthetic run that flushes every step, through 2,000 flushes; while it
keeps writing, each dashboard panel's queries after a ``refresh`` (goal: slowest panel p95 <=
300 ms).

Usage: ``python benchmarks/telemetry.py [--section glm|tiny|live] [--steps N] [--repeats N]
[--train-steps N] [--threads N] [--poll S]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from observability import DuckDBTelemetry, TelemetryConfig, open_run, refresh
from observability.parts import list_parts, parquet_options
from observability.records import build_table
from observability.schema import table_spec

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402  (benchmarks/stats.py)
from telemetry_tiny import section_tiny  # noqa: E402

VOCAB = 151_552
SAMPLES, TOKENS, PROMPT = 1024, 1024, 256


def glm_step(step: int, rng: np.random.Generator) -> dict:
    """One step's ``tokens`` columns as a producer hands them over (numpy, masked arrays, codes)."""
    n = SAMPLES * TOKENS
    pos = np.tile(np.arange(TOKENS, dtype=np.int32), SAMPLES)
    off = pos < PROMPT  # prompt tokens: no log-probs (null)
    rollout = -rng.exponential(1.0, n).astype(np.float32)
    train = np.minimum(rollout + rng.normal(0, 0.01, n).astype(np.float32), 0.0)
    reason = np.where(off, 4, np.where(rng.random(n) < 0.01, 1, 0)).astype(np.int8)

    def on_actions(x: np.ndarray) -> np.ma.MaskedArray:
        return np.ma.MaskedArray(x, mask=off)

    ids = rng.integers(0, VOCAB, n, dtype=np.int32)
    return {
        "step": np.full(n, step, dtype=np.int64),
        "sample_id": np.repeat(step * SAMPLES + np.arange(SAMPLES, dtype=np.int64), TOKENS),
        "pos": pos,
        "token_id": ids,
        "role": (~off).astype(np.int8),  # enum codes: prompt, action
        "loss_mask": ~off,
        "rollout_logp": on_actions(rollout),
        "train_logp": on_actions(train),
        "old_logp": on_actions(train),
        "teacher_logp": on_actions(rollout),
        "ratio": on_actions(np.exp(train - rollout)),
        "trust_mask": reason == 0,
        "mask_reason": reason,
        "advantage": on_actions(np.repeat(rng.normal(size=SAMPLES), TOKENS).astype(np.float32)),
        "entropy": on_actions(rng.exponential(1.0, n).astype(np.float32)),
        "prefix_hash": rng.integers(-(2**62), 2**62, n),
        "policy_version_rollout": np.full(n, step, dtype=np.int64),
        "train_token_id": ids,
        "teacher_id": "teacher-a",
    }


def _steps_readable(run: Path, step: int) -> bool:
    con = open_run(run)
    try:
        return (
            con.execute("SELECT count(*) FROM tokens WHERE step = ?", [step]).fetchall()[0][0] > 0
        )
    finally:
        con.close()


def _clocks() -> tuple[float, float, float]:
    """(wall, process CPU, this thread's CPU) now."""
    return time.perf_counter(), time.process_time(), time.thread_time()


def _per_step(t0: tuple, t1: tuple, n: int) -> tuple[float, float, float]:
    return tuple((b - a) / n for a, b in zip(t0, t1, strict=True))


def _glm_round(tmp: str, r: int, steps: list[dict], tables: list) -> dict:
    """One round: raw write_table of each step and the sink's ingest of the steps back to back
    (emit .. flush), in an order that alternates by round; then the steps as a training loop
    emits them (emit, step_end, wait until readable). Each phase on three clocks: wall, process
    CPU, the calling (training) thread's CPU, per step."""
    opts = parquet_options(table_spec("tokens"))
    config = TelemetryConfig(compact_on_close=False)
    out: dict = {}

    def raw() -> None:
        os.sync()
        t0 = _clocks()
        for i, t in enumerate(tables):
            pq.write_table(t, f"{tmp}/raw-{r}-{i}.parquet", **opts)
        out["raw"] = _per_step(t0, _clocks(), len(tables))

    def ingest() -> None:
        os.sync()
        tel = DuckDBTelemetry(Path(tmp) / f"ingest{r}", run_info={"vocab_size": VOCAB},
                              config=config)  # fmt: skip
        t0 = _clocks()
        for i, s in enumerate(steps):
            tel.emit("tokens", s)
            tel.step_end(i)
        tel.flush()
        out["ingest"] = _per_step(t0, _clocks(), len(steps))
        tel.close()

    for phase in (raw, ingest) if r % 2 == 0 else (ingest, raw):
        phase()
    run = Path(tmp) / f"loop{r}"
    tel = DuckDBTelemetry(run, run_info={"vocab_size": VOCAB}, config=config)
    out["emit"], out["lag"] = [], []
    for i, s in enumerate(steps):
        t0 = _clocks()
        tel.emit("tokens", s)
        out["emit"].append(_per_step(t0, _clocks(), 1))
        tel.step_end(i)
        t0 = time.perf_counter()
        while not _steps_readable(run, i):
            time.sleep(0.02)
        out["lag"].append(time.perf_counter() - t0)
    tel.close()
    return out


def glm_ratios(rounds: list[dict]) -> dict[str, list[float]]:
    """Per-round ratios, each of two readings of one clock: ``emit_wall`` / ``emit_cpu`` (the
    training thread in ``emit`` over the same thread in ``write_table``, per step; wall with
    wall, thread CPU with thread CPU) and ``ingest_wall`` / ``ingest_cpu`` (raw over the sink's
    emit .. flush, per step; wall with wall, process CPU with process CPU: >= 1 is as fast)."""
    out: dict[str, list[float]] = {k: [] for k in ("emit_wall", "emit_cpu", "ingest_wall",
                                                   "ingest_cpu")}  # fmt: skip
    for r in rounds:
        raw, ing = r["raw"], r["ingest"]
        emit = [statistics.mean(e[i] for e in r["emit"]) for i in range(3)]
        out["emit_wall"].append(emit[0] / raw[0])
        out["emit_cpu"].append(emit[2] / raw[2])
        out["ingest_wall"].append(raw[0] / ing[0])
        out["ingest_cpu"].append(raw[1] / ing[1])
    return out


def section_glm(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    steps = [glm_step(s, rng) for s in range(args.steps)]
    tables = [build_table("tokens", s, run_id="bench", rank=0, vocab_size=VOCAB) for s in steps]
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        _glm_round(tmp, -1, steps, tables)  # first touches of memory, not recorded
        rounds = [_glm_round(tmp, r, steps, tables) for r in range(args.repeats)]
    print(f"## glm: {SAMPLES * TOKENS:,} token rows a step, {args.steps} steps x {args.repeats} "
          f"rounds after a warm-up round (load average {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")  # fmt: skip
    for name, label in (("raw", "raw write_table"), ("ingest", "sink emit .. flush")):
        w = stats.summary([1e3 * r[name][0] for r in rounds])
        c = stats.summary([1e3 * r[name][1] for r in rounds])
        t = stats.summary([1e3 * r[name][2] for r in rounds])
        print(f"{label:<22}: wall {w.fmt(1)} ms, process CPU {c.fmt(1)} ms, calling thread "
              f"CPU {t.fmt(1)} ms a step")  # fmt: skip
    for i, clock in ((0, "wall"), (2, "thread CPU")):
        e = stats.summary([1e3 * e[i] for r in rounds for e in r["emit"]])
        print(f"emit, training thread : {clock} {e.fmt(1)} ms a step")
    ratios = glm_ratios(rounds)
    print(f"emit / write_table (goal <= 0.1): wall {stats.summary(ratios['emit_wall']).fmt(3)}; "
          f"thread CPU {stats.summary(ratios['emit_cpu']).fmt(3)}")  # fmt: skip
    print(f"ingest, x raw throughput (goal >= 0.8): wall "
          f"{stats.summary(ratios['ingest_wall']).fmt(2)}; process CPU "
          f"{stats.summary(ratios['ingest_cpu']).fmt(2)}")  # fmt: skip
    lags = sorted(lag for r in rounds for lag in r["lag"])
    print(f"readable by open_run after step_end (wall): median {statistics.median(lags):.2f} s, "
          f"max {lags[-1]:.2f} s of {len(lags)}   (goal <= flush_seconds + 1 = "
          f"{TelemetryConfig.flush_seconds + 1:.0f} s)")  # fmt: skip


_WRITER = """
import sys
from dashboards.synthetic import SyntheticRun, write_run
write_run(sys.argv[1], SyntheticRun(steps=int(sys.argv[2]), samples_per_step=64, prompt_len=16,
          response_len=32, topk_every=8), flush_every_step=True)
"""


def section_live(args: argparse.Namespace) -> None:
    from dashboard import panels, timings  # benchmarks/dashboard.py

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "live"
        steps = args.flushes + 400
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(run), str(steps)])
        t0 = time.monotonic()
        while True:  # wait for the run to reach --flushes flushes
            time.sleep(1.0)
            if (run / "telemetry").is_dir():
                con = open_run(run)
                last = con.execute("SELECT max(step) FROM steps").fetchall()[0][0]
                con.close()
                if last is not None and last + 1 >= args.flushes:
                    break
            if writer.poll() is not None:
                raise RuntimeError("the writer ended before reaching the flush count")
        print(f"## live: {last + 1} flushes written in {time.monotonic() - t0:.0f} s; timing "
              "while it writes (refresh + the panel's queries)")  # fmt: skip
        con = open_run(run)
        parts = {  # parts a reader scans / files in the folder (covered ones included)
            t: f"{len(list_parts(run, t))}/{len(list((run / 'telemetry' / t).glob('part-*')))}"
            for t in ("tokens", "steps")
        }
        worst = 0.0
        for page, panel, fn in panels(con):

            def refreshed(fn=fn):
                refresh(con)
                return fn()

            p50, p95, cpu = timings(refreshed, args.repeats)
            worst = max(worst, p95)
            print(f"  {page:<18}{panel:<30}{p50:8.1f}{p95:8.1f} ms p50/p95 {cpu:8.1f} ms cpu")
        con = open_run(run)
        last_timed = con.execute("SELECT max(step) FROM steps").fetchall()[0][0]
        still = writer.poll() is None
        print(
            f"  slowest panel p95 {worst:.1f} ms (goal <= 300 ms); writer at flush "
            f"{last_timed + 1} when done, still writing: {still}; parts scanned/on disk: {parts}"
        )
        writer.kill()
        writer.wait()


SECTIONS = {"glm": section_glm, "tiny": section_tiny, "live": section_live}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--section", choices=sorted(SECTIONS), action="append")
    p.add_argument("--steps", type=int, default=4, help="glm: steps of 1,048,576 rows")
    p.add_argument("--repeats", type=int, default=3, help="glm/tiny: runs; live: calls a panel")
    p.add_argument("--train-steps", type=int, default=40, help="tiny: steps per training run")
    p.add_argument("--threads", type=int, default=1, help="tiny: torch threads per run")
    p.add_argument("--poll", type=float, default=0.1, help="tiny: the reader's poll, seconds")
    p.add_argument("--flushes", type=int, default=2000, help="live: flushes before timing")
    args = p.parse_args(argv)
    for name in args.section or list(SECTIONS):
        SECTIONS[name](args)


if __name__ == "__main__":
    main()
