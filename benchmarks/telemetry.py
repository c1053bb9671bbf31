"""Telemetry sink benchmarks, measured side by side in one run (CPU clocks, one machine).

Section ``glm``: a GLM-sized step, 1,048,576 ``tokens`` rows (1,024 samples x 1,024 tokens, every
column filled, log-probs null off the actions) handed to ``DuckDBTelemetry``, against a raw
``pyarrow.parquet.write_table`` of the same rows with the same file settings. Goals: the training
thread's time inside ``emit`` <= 0.1x raw write_table; the writer's ingest (emit .. close of
``--steps`` steps) >= 0.8x raw throughput; each step readable by ``open_run`` within
``flush_seconds`` + 1 s of ``step_end``. Section ``tiny``: the default tiny training config with
``--telemetry duckdb``: telemetry CPU (the training thread inside the sink, the writer thread and
the polars / Arrow pool threads that work for it) as a share of the process's CPU over the steps
(goal <= 3%), and the live lag, from a step's ``step_end`` to the commit of the part holding its
``steps`` row (goal <= flush_seconds + one step). Section ``live``: a synthetic run that
flushes every step, through 2,000 flushes; while it keeps writing, each dashboard panel's queries
after a ``refresh`` (goal: slowest panel p95 <= 300 ms).

Usage: ``python benchmarks/telemetry.py [--section glm|tiny|live] [--steps N] [--repeats N]``.
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


def _glm_round(tmp: str, r: int, steps: list[dict], tables: list) -> tuple[float, float, list]:
    """One round: raw write_table of each step, the sink's ingest of the steps back to back
    (emit .. flush), then the steps as a training loop would emit them (emit, step_end, the
    step's compute until readable). Returns (raw s, ingest s, [(emit CPU s, readable s)])."""
    opts = parquet_options(table_spec("tokens"))
    os.sync()
    t0 = time.perf_counter()
    for i, t in enumerate(tables):
        pq.write_table(t, f"{tmp}/raw-{r}-{i}.parquet", **opts)
    raw = (time.perf_counter() - t0) / len(tables)
    os.sync()
    config = TelemetryConfig(compact_on_close=False)
    tel = DuckDBTelemetry(Path(tmp) / f"ingest{r}", run_info={"vocab_size": VOCAB}, config=config)
    t0 = time.perf_counter()
    for i, s in enumerate(steps):
        tel.emit("tokens", s)
        tel.step_end(i)
    tel.flush()
    ingest = (time.perf_counter() - t0) / len(steps)
    tel.close()
    run = Path(tmp) / f"loop{r}"
    tel = DuckDBTelemetry(run, run_info={"vocab_size": VOCAB}, config=config)
    loop = []
    for i, s in enumerate(steps):
        e0 = time.thread_time()
        tel.emit("tokens", s)
        emit = time.thread_time() - e0
        tel.step_end(i)
        t0 = time.perf_counter()
        while not _steps_readable(run, i):
            time.sleep(0.02)
        loop.append((emit, time.perf_counter() - t0))
    tel.close()
    return raw, ingest, loop


def section_glm(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    steps = [glm_step(s, rng) for s in range(args.steps)]
    tables = [build_table("tokens", s, run_id="bench", rank=0, vocab_size=VOCAB) for s in steps]
    with tempfile.TemporaryDirectory() as tmp:
        warm = _glm_round(tmp, -1, steps, tables)  # first touches of memory, not recorded
        rounds = [_glm_round(tmp, r, steps, tables) for r in range(args.repeats)]
    raw = statistics.median(r[0] for r in rounds)
    ingest = statistics.median(r[1] for r in rounds)
    emits = [e for r in rounds for e, _ in r[2]]
    lags = [lag for r in rounds for _, lag in r[2]]
    emit = statistics.median(emits)
    print(f"## glm: {SAMPLES * TOKENS:,} token rows a step, {args.steps} steps x {args.repeats} "
          f"rounds after a warm-up round (load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs)")  # fmt: skip
    print(f"raw write_table          : {1e3 * raw:7.1f} ms a step (median of rounds)")
    print(f"emit (training thread)   : {1e3 * emit:7.1f} ms a step (median; max "
          f"{1e3 * max(emits):.0f} ms; warm-up round's first {1e3 * warm[2][0][0]:.0f} ms), "
          f"{emit / raw:.3f}x raw   (goal <= 0.1)")  # fmt: skip
    print(f"writer ingest            : {1e3 * ingest:7.1f} ms a step, {raw / ingest:.2f}x raw "
          f"throughput (warm-up round {warm[0] / warm[1]:.2f}x)   (goal >= 0.8)")  # fmt: skip
    print(f"readable after step_end  : {max(lags):.2f} s worst of {len(lags)}, median "
          f"{statistics.median(lags):.2f} s   (goal <= flush_seconds + 1 = "
          f"{TelemetryConfig.flush_seconds + 1:.0f} s)")  # fmt: skip


_POOL_THREADS = ("polars", "jemalloc", "tokio")
"""Name prefixes of the library threads that work only for the sink in a training process
(polars runs the column rules, Arrow's allocator)."""


def sink_threads_cpu(sink) -> float:
    """CPU seconds so far of the sink's writer thread and the library pools it uses (``/proc``)."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            if name.startswith(_POOL_THREADS):
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
        except OSError:  # the thread ended
            pass
    return total / 1e9 + (sink.writer_cpu_seconds() or 0.0)


class _Metered:
    """Forwards to the real sink; adds up the training thread's CPU inside it and each step end."""

    def __init__(self, sink) -> None:
        self.sink, self.run_id, self.run_dir = sink, sink.run_id, sink.run_dir
        self.cpu_s, self.step_ends = 0.0, {}

    def emit(self, table, columns) -> None:
        t0 = time.thread_time()
        self.sink.emit(table, columns)
        self.cpu_s += time.thread_time() - t0

    def step_end(self, step: int) -> None:
        t0 = time.thread_time()
        self.sink.step_end(step)
        self.cpu_s += time.thread_time() - t0
        self.step_ends[step] = time.time()  # wall clock: compared with part mtimes
        if step == 0:  # steps after the first (its compile and warm-up) are measured
            self.start = (time.process_time(), self.cpu_s, sink_threads_cpu(self.sink))
        self.end = (time.process_time(), self.cpu_s, sink_threads_cpu(self.sink))

    def close(self, status: str = "finished") -> None:
        self.sink.close(status)


def commit_times(run_dir: Path) -> dict[int, float]:
    """Step -> wall time its ``steps`` row became readable: the modification time of the first
    part holding it (parts are renamed into place right after their last write and fsync)."""
    seen: dict[int, float] = {}
    for part in (Path(run_dir) / "telemetry" / "steps").glob("part-*.parquet"):
        mtime = part.stat().st_mtime
        for step in set(pq.read_table(part, columns=["step"])["step"].to_pylist()):
            seen[step] = min(seen.get(step, mtime), mtime)
    return seen


def section_tiny(args: argparse.Namespace) -> None:
    import core.driver as driver

    cfg = driver.resolve_config(None, [], steps=args.train_steps)
    made: list[_Metered] = []
    real_open = driver.open_telemetry

    def open_metered(*a, **kw):  # the loop's sink, metered
        made.append(_Metered(real_open(*a, **kw)))
        return made[-1]

    driver.open_telemetry = open_metered
    try:
        for r in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.monotonic()
                run_dir, _ = driver.run_training(
                    cfg, runs_root=tmp, telemetry="duckdb", progress=False
                )
                _report_tiny(r, made[-1], commit_times(run_dir), time.monotonic() - t0)
    finally:
        driver.open_telemetry = real_open


def _report_tiny(r: int, m: _Metered, readable: dict, seconds: float) -> None:
    (p0, s0, w0), (p1, s1, w1) = m.start, m.end
    share = ((s1 - s0) + (w1 - w0)) / (p1 - p0)
    steps = sorted(m.step_ends)
    step_s = (m.step_ends[steps[-1]] - m.step_ends[steps[1]]) / (len(steps) - 2)
    lags = [readable[s] - m.step_ends[s] for s in steps[1:] if s in readable]
    print(f"## tiny run {r}: {len(steps)} steps of {step_s:.2f} s ({seconds:.0f} s in all)")
    print(f"telemetry CPU: training thread {s1 - s0:.2f} s + sink threads {w1 - w0:.2f} s of "
          f"{p1 - p0:.1f} s process CPU = {100 * share:.2f}%   (goal <= 3%)")  # fmt: skip
    print(f"live lag (step_end -> its part committed): max {max(lags):.2f} s, median "
          f"{statistics.median(lags):.2f} s over {len(lags)} steps   (goal <= "
          f"{TelemetryConfig.flush_seconds:.0f} s + one step = "
          f"{TelemetryConfig.flush_seconds + step_s:.2f} s)")  # fmt: skip


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
    p.add_argument("--flushes", type=int, default=2000, help="live: flushes before timing")
    args = p.parse_args(argv)
    for name in args.section or list(SECTIONS):
        SECTIONS[name](args)


if __name__ == "__main__":
    main()
