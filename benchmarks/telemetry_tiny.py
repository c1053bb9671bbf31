"""Section ``tiny`` of ``telemetry.py``: what telemetry costs a tiny training run, and its live lag.

Arms, each a fresh process training the default tiny config (``configs/grpo_tiny.toml``, one
torch thread, evaluations only before the first and after the last step: ``train.eval_every=0``,
so the measured window holds training steps only) for ``--train-steps`` steps, run in
interleaved rounds (the arm order rotates):

- ``bare``: ``--telemetry none`` with the step's rows not built (``core.loops.grpo.step_records``
  replaced, in this process only, by one that returns no tables): training without telemetry.
- ``none``: ``--telemetry none`` as shipped: the loop still builds every row and hands it to
  ``NullTelemetry``, which drops it.
- ``duckdb``: ``--telemetry duckdb``: rows built, emitted, written by the sink's threads. Beside
  it, a reader process polls the run the way the dashboard does (``dashboards.store.RunHandle
  .steps``: ``observability.refresh`` when the telemetry folders change, then the ``steps``
  rollup) and notes when each step first shows; the live lag is that moment minus the step's
  ``wall_time`` (stamped when its rows are built, before ``emit``), wall clocks of one machine.

Per step: wall (``perf_counter``) and process CPU (``process_time``: every thread of the
training process, so row building, ``emit`` and the writer and pool threads; not the reader's)
between the first and the last ``step_end``; per run: wall and CPU of ``run_training`` (the
sink's close and compaction included). The cost is each round's ``duckdb`` over ``bare`` (and
``none`` over ``bare``): wall with wall, CPU with CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402  (benchmarks/stats.py)

ARMS = ("bare", "none", "duckdb")


def step_rates(marks: list[tuple[float, ...]]) -> tuple[float, ...]:
    """Seconds a step on each clock, from clock readings (wall, CPU, ...) at each ``step_end``;
    the first step (compile and warm-up) is left out: the window runs from its end to the last."""
    if len(marks) < 2:
        raise ValueError("need at least two step ends")
    n = len(marks) - 1
    return tuple((b - a) / n for a, b in zip(marks[0], marks[-1], strict=True))


def first_seen_lags(observations: list[dict]) -> dict[int, float]:
    """Step -> seconds from its ``wall_time`` to the first poll that saw it."""
    out: dict[int, float] = {}
    for o in sorted(observations, key=lambda o: o["seen"]):
        out.setdefault(o["step"], o["seen"] - o["wall_time"])
    return out


def rotated(arms: tuple[str, ...], r: int) -> list[str]:
    """The arm order of round ``r``: rotated by ``r`` so no arm always runs first."""
    k = r % len(arms)
    return list(arms[k:] + arms[:k])


def ratios(a: list[float], b: list[float]) -> list[float]:
    """Per-round ratios a / b of two arms measured in the same rounds."""
    return [x / y for x, y in zip(a, b, strict=True)]


# -- child processes ---------------------------------------------------------------------------


class _Marked:
    """Forwards to the run's sink; notes both clocks at each ``step_end``."""

    def __init__(self, sink, marks: list) -> None:
        self._sink, self._marks = sink, marks

    def __getattr__(self, name):
        return getattr(self._sink, name)

    def step_end(self, step: int) -> None:
        self._sink.step_end(step)
        self._marks.append((time.perf_counter(), time.process_time(), time.thread_time()))
        self.threads = thread_cpu_by_name()
        writer = getattr(self._sink, "writer_cpu_seconds", None)
        self.threads["(sink writer thread)"] = (writer() or 0.0) if writer else 0.0
        if step == 0:
            self.threads0 = self.threads


def thread_cpu_by_name() -> dict[str, float]:
    """CPU seconds so far of this process's live threads, summed by name (``/proc``)."""
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip().rstrip("0123456789").rstrip("-_.") or "?"
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[name] = out.get(name, 0.0) + int(f.read().split()[0]) / 1e9
        except OSError:  # the thread ended
            pass
    return out


def child_train(arm: str, root: str, steps: int, threads: int, out: str) -> None:
    import torch

    torch.set_num_threads(threads)
    import core.driver as driver
    import core.loops.grpo as grpo

    marks: list = []
    made: list[_Marked] = []
    real_open, real_records = driver.open_telemetry, grpo.step_records

    def open_marked(*a, **kw):
        made.append(_Marked(real_open(*a, **kw), marks))
        return made[-1]

    driver.open_telemetry = open_marked
    if arm == "bare":
        grpo.step_records = lambda *a, **kw: {}
    cfg = driver.resolve_config(None, ["train.eval_every=0"], steps=steps)
    t0, c0 = time.perf_counter(), time.process_time()
    kind = "duckdb" if arm in ("duckdb", "lag") else "none"
    driver.run_training(cfg, runs_root=root, telemetry=kind, progress=False)
    run = (time.perf_counter() - t0, time.process_time() - c0)
    grpo.step_records = real_records
    m = made[-1]
    threads = {k: v - m.threads0.get(k, 0.0) for k, v in m.threads.items()}
    res = {"arm": arm, "marks": marks, "run": run, "threads": threads}
    Path(out).write_text(json.dumps(res))


def child_reader(root: str, out: str, poll: float) -> None:
    from dashboards.store import QueryError, RunHandle

    while not (runs := list(Path(root).glob("*/telemetry"))):
        time.sleep(poll)
    handle = RunHandle(runs[0].parent)
    seen: set[int] = set()
    with open(out, "w") as f:
        while True:
            try:
                df = handle.steps()
            except (QueryError, ValueError):
                time.sleep(poll)
                continue
            now = time.time()
            for step, wall in zip(df["step"], df["wall_time"], strict=True):
                if int(step) not in seen:
                    seen.add(int(step))
                    row = {"step": int(step), "seen": now, "wall_time": wall.timestamp()}
                    f.write(json.dumps(row) + "\n")
            f.flush()
            time.sleep(poll)


# -- the section -------------------------------------------------------------------------------


def _one(arm: str, args: argparse.Namespace, tmp: str, r: int) -> dict:
    root, out = f"{tmp}/{arm}{r}", f"{tmp}/{arm}{r}.json"
    me = [sys.executable, __file__]
    reader = None
    if arm == "duckdb":
        seen = f"{tmp}/{arm}{r}.seen"
        reader = subprocess.Popen([*me, "reader", root, seen, str(args.poll)])
    cmd = [*me, "train", arm, root, str(args.train_steps), str(args.threads), out]
    subprocess.run(cmd, check=True)
    res = json.loads(Path(out).read_text())
    if reader is not None:
        time.sleep(2 * args.poll + 1.0)  # the last flush (at close) has been polled
        reader.send_signal(signal.SIGTERM)
        reader.wait()
        obs = [json.loads(x) for x in Path(seen).read_text().splitlines()]
        res["lags"] = first_seen_lags(obs)
    return res


def section_tiny(args: argparse.Namespace) -> None:
    from observability import TelemetryConfig

    load0 = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {a: [] for a in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for arm in rotated(ARMS, r):
                runs[arm].append(_one(arm, args, tmp, r))
    step = {a: [step_rates(x["marks"]) for x in runs[a]] for a in ARMS}
    print(f"## tiny: {args.repeats} rounds x {len(ARMS)} arms ({', '.join(ARMS)}), "
          f"{args.train_steps} steps each, {args.threads} torch thread(s); load average "
          f"{load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    print("arm     step wall ms      step CPU ms     of it: training thread / others"
          "     run wall s     run CPU s")  # fmt: skip
    for a in ARMS:
        w, c, t = (stats.summary([1e3 * s[i] for s in step[a]]) for i in range(3))
        o = stats.summary([1e3 * (s[1] - s[2]) for s in step[a]])
        rw = stats.summary([x["run"][0] for x in runs[a]])
        rc = stats.summary([x["run"][1] for x in runs[a]])
        print(f"{a:<7} {w.mean:6.1f} ± {w.sd:5.1f}  {c.mean:6.1f} ± {c.sd:5.1f}  "
              f"{t.mean:6.1f} ± {t.sd:4.1f} / {o.mean:5.1f} ± {o.sd:4.1f}    "
              f"{rw.mean:6.1f} ± {rw.sd:4.1f}  {rc.mean:6.1f} ± {rc.sd:4.1f}")  # fmt: skip
    for x in runs["duckdb"]:
        print(
            "duckdb run, CPU s by thread name over the steps: "
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(x["threads"].items()))
        )
    for a in ("none", "duckdb"):
        for i, clock in ((0, "wall"), (1, "CPU")):
            ra = ratios([s[i] for s in step[a]], [s[i] for s in step["bare"]])
            d = stats.paired([1e3 * s[i] for s in step[a]], [1e3 * s[i] for s in step["bare"]])
            print(f"step {clock:<4} {a}/bare per round: "
                  f"{', '.join(f'{x:.3f}' for x in ra)}; mean {stats.summary(ra).fmt(3)}; "
                  f"{d.fmt(a, 'bare', 1)} ms")  # fmt: skip
        for i, clock in ((0, "wall"), (1, "CPU")):
            ra = ratios([x["run"][i] for x in runs[a]], [x["run"][i] for x in runs["bare"]])
            print(f"run  {clock:<4} {a}/bare per round: {stats.summary(ra).fmt(3)}")
    flush = TelemetryConfig.flush_seconds
    for r, x in enumerate(runs["duckdb"]):
        lags = sorted(v for k, v in x["lags"].items() if int(k) > 0)
        w = step_rates(x["marks"])[0]
        print(f"lag run {r}: {len(lags)} steps seen by the reader (poll {args.poll:.2f} s): "
              f"median {lags[len(lags) // 2]:.2f} s, max {lags[-1]:.2f} s   (goal <= "
              f"flush_seconds + one step = {flush + w:.2f} s)")  # fmt: skip


def main(argv: list[str]) -> None:
    if argv[0] == "train":
        child_train(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5])
    elif argv[0] == "reader":
        child_reader(argv[1], argv[2], float(argv[3]))
    else:
        raise SystemExit(f"unknown child {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
