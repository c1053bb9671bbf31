"""Shipped configs learn: every ``configs/*.toml`` trained as a user starts it, over seeds, gated.

For each config and seed: ``closedloop train --config configs/NAME.toml --seed S --telemetry
duckdb`` (its own ``train.steps``), then ``closedloop gate RUN``. Records, per seed, the held-out
greedy accuracy at the first and the last eval (the run's ``evals`` table, read with
``observability.open_run``; split ``heldout`` and, where the config evaluates per domain,
``heldout/<domain>``), the gate's verdict and failing checks, the training wall and the process
CPU. The report gives the held-out gain (end − start) as mean ± sd over seeds
(``benchmarks/stats.py``) and the gate result per seed.

OPD / MOPD route to the domain experts of the same seed: ``expert_addition`` /
``expert_subtraction`` seed S write their weights under ``ROOT/experts/sS/`` (not the repo's
``runs/experts``), and ``opd_tiny`` / ``mopd_tiny`` seed S get ``teachers.routes`` pointing there.
Every process runs one torch thread (``OMP_NUM_THREADS=1``), at most ``--jobs`` at once, niced.
``NAME@STEPS`` trains NAME for STEPS steps instead of its own length (e.g. ``grpo_tiny@300``).
Results are appended to ``ROOT/results.jsonl`` as each run ends; a rerun skips what is there.

Usage: ``python benchmarks/configs.py [--root DIR] [--configs NAME ...] [--seeds 0 1 2]
[--jobs 2] [--report]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402  (benchmarks/stats.py)

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "closedloop"
ORDER = (  # cheapest first (measured on the CPU machine), experts before their students
    "grpo_tiny",
    "expert_addition",
    "expert_subtraction",
    "opd_tiny",
    "mopd_tiny",
    "agentic_tiny",
    "compaction_tiny",
    "sao_tiny",
)
EXPERTS = {"opd_tiny": ("addition",), "mopd_tiny": ("addition", "subtraction")}


@dataclass(frozen=True)
class Job:
    name: str  # NAME or NAME@STEPS
    seed: int

    @property
    def config(self) -> str:
        return self.name.split("@")[0]

    @property
    def steps(self) -> int | None:
        return int(self.name.split("@")[1]) if "@" in self.name else None

    @property
    def key(self) -> str:
        return f"{self.name}-s{self.seed}"

    def needs(self) -> tuple[str, ...]:
        """Keys of the jobs this one waits for (the same seed's experts)."""
        return tuple(f"expert_{d}-s{self.seed}" for d in EXPERTS.get(self.config, ()))


def plan(names: list[str], seeds: list[int]) -> list[Job]:
    """Jobs config by config (all seeds of one before the next), experts added where needed."""
    wanted = list(names)
    for n in names:
        for d in EXPERTS.get(n.split("@")[0], ()):
            if f"expert_{d}" not in wanted:
                wanted.insert(0, f"expert_{d}")
    return [Job(n, s) for n in wanted for s in seeds]


def gate_verdict(output: str) -> tuple[bool | None, list[str]]:
    """(passed, failing check names) from ``closedloop gate`` output; None when no verdict."""
    passed = None
    failing = []
    for line in output.splitlines():
        if line.startswith("gate PASSED"):
            passed = True
        elif line.startswith("gate FAILED"):
            passed = False
        parts = line.split()
        if len(parts) >= 2 and parts[1] == "fail":
            failing.append(parts[0])
    return passed, failing


def heldout(rows: list[tuple[int, str, float]]) -> dict[str, tuple[float, float]]:
    """``heldout*`` split -> (accuracy at its first eval, at its last) from (step, split, acc)."""
    out: dict[str, tuple[float, float]] = {}
    for split in sorted({s for _, s, _ in rows if s.startswith("heldout")}):
        seq = sorted((step, acc) for step, s, acc in rows if s == split)
        out[split] = (seq[0][1], seq[-1][1])
    return out


def _train_args(job: Job, root: Path) -> list[str]:
    args = ["--config", str(REPO / "configs" / f"{job.config}.toml"), "--seed", str(job.seed)]
    if job.steps is not None:
        args += ["--steps", str(job.steps)]
    if job.config.startswith("expert_"):
        ck = root / "experts" / f"s{job.seed}" / job.config.removeprefix("expert_")
        args += ["--set", f'train.checkpoint_dir="{ck}"']
    if job.config in EXPERTS:
        routes = ", ".join(
            f'{d} = "{root / "experts" / f"s{job.seed}" / d}"' for d in EXPERTS[job.config]
        )
        args += ["--set", f"teachers.routes={{{routes}}}"]
    return args


def run_job(job: Job, root: Path) -> dict:
    runs = root / "runs" / job.key
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = ["nice", "-n", "5", str(BIN), "train", *_train_args(job, root)]
    cmd += ["--telemetry", "duckdb", "--run-dir", str(runs)]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log, _ = proc.communicate()
    wall = time.monotonic() - t0
    (root / "logs").mkdir(parents=True, exist_ok=True)
    (root / "logs" / f"{job.key}.log").write_text(log)
    rec = {"key": job.key, "name": job.name, "seed": job.seed, "rc": proc.returncode}
    rec |= {"wall_s": round(wall, 1), "load": os.getloadavg()[0]}
    run_dirs = sorted(runs.iterdir()) if runs.is_dir() else []
    if proc.returncode != 0 or not run_dirs:
        return rec | {"error": log[-2000:]}
    run = run_dirs[-1]
    gate = subprocess.run(
        [str(BIN), "gate", str(run)], cwd=REPO, capture_output=True, text=True, env=env
    )
    passed, failing = gate_verdict(gate.stdout + gate.stderr)
    (root / "logs" / f"{job.key}.gate").write_text(gate.stdout + gate.stderr)
    import observability

    con = observability.open_run(run)
    rows = con.execute("SELECT step, split, accuracy FROM evals").fetchall()
    con.close()
    return rec | {
        "run": str(run),
        "heldout": heldout(rows),
        "gate_rc": gate.returncode,
        "gate_passed": passed,
        "gate_failing": failing,
    }


def run_all(jobs: list[Job], root: Path, n_workers: int) -> None:
    results = root / "results.jsonl"
    done = {json.loads(x)["key"]: json.loads(x) for x in results.read_text().splitlines()} if (
        results.exists()
    ) else {}  # fmt: skip
    todo = [j for j in jobs if j.key not in done]
    lock = threading.Lock()
    running: set[str] = set()

    def ready(j: Job) -> bool | None:  # True: go; False: wait; None: a dependency failed
        for need in j.needs():
            if need in done:
                if done[need].get("rc") != 0:
                    return None
            elif need in running or any(x.key == need for x in todo):
                return False
        return True

    def worker() -> None:
        while True:
            with lock:
                pick = None
                for j in list(todo):
                    r = ready(j)
                    if r is None:
                        todo.remove(j)
                    elif r:
                        pick = j
                        break
                if pick is None and not todo:
                    return
                if pick is not None:
                    todo.remove(pick)
                    running.add(pick.key)
            if pick is None:
                time.sleep(2.0)
                continue
            print(f"start {pick.key} (load {os.getloadavg()[0]:.1f})", flush=True)
            rec = run_job(pick, root)
            with lock:
                running.discard(pick.key)
                done[pick.key] = rec
                with results.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
            print(f"done  {pick.key}: {_line(rec)}", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"children CPU {resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime:.0f} s user")


def _line(rec: dict) -> str:
    if rec.get("rc") != 0 or "heldout" not in rec:
        return f"FAILED rc={rec.get('rc')}"
    a0, a1 = rec["heldout"]["heldout"]
    gate = {True: "pass", False: "FAIL", None: "?"}[rec["gate_passed"]]
    return f"{a0:.3f} -> {a1:.3f} in {rec['wall_s']:.0f} s, gate {gate} {rec['gate_failing']}"


def report(root: Path) -> None:
    recs = [json.loads(x) for x in (root / "results.jsonl").read_text().splitlines()]
    names = list(dict.fromkeys(r["name"] for r in recs))
    print("| config | seeds | held-out start | end | gain (points) | wall s | gate per seed |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        rs = sorted((r for r in recs if r["name"] == name), key=lambda r: r["seed"])
        ok = [r for r in rs if "heldout" in r]
        gates = ", ".join(
            f"s{r['seed']} "
            + (
                ("stopped" if r.get("rc", 0) < 0 else "run failed")
                if "heldout" not in r
                else ("pass" if r["gate_passed"] else f"fail {','.join(r['gate_failing'])}")
            )
            for r in rs
        )
        if not ok:
            print(f"| `{name}` | {len(rs)} | — | — | — | — | {gates} |")
            continue
        splits = list(ok[0]["heldout"])
        if len(splits) == 2:  # one domain: its split repeats ``heldout``
            splits = ["heldout"]
        for split in splits:
            a0 = stats.summary([r["heldout"][split][0] for r in ok])
            a1 = stats.summary([r["heldout"][split][1] for r in ok])
            g = stats.summary([r["heldout"][split][1] - r["heldout"][split][0] for r in ok])
            wall = stats.summary([r["wall_s"] for r in ok])
            label = name if split == "heldout" else f"{name} {split.removeprefix('heldout/')}"
            print(f"| `{label}` | {' '.join(str(r['seed']) for r in ok)} | {a0.mean:.3f} ± "
                  f"{a0.sd:.3f} | {a1.mean:.3f} ± {a1.sd:.3f} | {g.fmt(1, 100)} | "
                  f"{wall.mean:.0f} | {gates if split == 'heldout' else ''} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path("/tmp/closedloop-configs"))
    p.add_argument("--configs", nargs="+", default=list(ORDER))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=2, help="runs at once")
    p.add_argument("--report", action="store_true", help="only print the table of ROOT")
    args = p.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    if not args.report:
        run_all(plan(args.configs, args.seeds), args.root, args.jobs)
    report(args.root)


if __name__ == "__main__":
    main()
