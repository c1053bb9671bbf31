"""MOPD on our task world: the paper's table from one SFT base, every arm with the same lr sweep.

1. Domain experts: GRPO + IcePop from the shipped SFT base on one domain each (addition,
   subtraction; ``configs/expert_*.toml``, seed 0), ``--expert-steps`` steps; trained once and
   shared by every student.
2. An off-source teacher: a clean SFT (no flawed demonstrations) from another initialisation
   (``closedloop pretrain --seed 7 --teacher-error-rate 0``), stronger than the experts; once.
3. Students, all from the same SFT base at equal student samples per step (``--prompts``, 64):
   MOPD sampled (OPD advantage, group size 1 × 64 prompts, each sample hard-routed to its
   domain's expert), MOPD Top-k (the Top-k reverse KL, K = ``--topk``), Mix-RL (GRPO on the mixed
   domains, 8 prompts × 8, the experts' recipe). Every arm runs every ``--lrs`` learning rate at
   every ``--seeds`` seed (the seed sets prompts and sampling; the SFT base, the experts and the
   held-out problems are the same in every run); each arm reports its best lr's mean ± sd.
4. Per-domain greedy held-out accuracy (the same ``--eval-per-domain`` problems of each domain in
   every run: ``task.eval_per_op``) normalized by that domain's expert; the initial per-token KL
   (sampled reverse-KL estimate on the SFT base's own addition samples, one probe per seed) to the
   same-source addition expert and to the off-source teacher. Scores come from the runs'
   telemetry (``observability.distill``), as the notebook computes them.
Runs keep DuckDB telemetry under ``--run-dir``: ``shared/`` (experts, teacher, KL probes) and one
directory per cell, ``cells/lr<lr>-seed<seed>/`` (the three students plus links to the experts
and that seed's probes): ``notebooks/opd_vs_mixrl.ipynb`` reads one cell. ``--section opd``
instead measures the acceptance run of ``configs/opd_tiny.toml`` (OPD alone, group size 1, lr as
shipped, towards the addition expert) at every seed: the share of the base → expert held-out gap
it closes, and its wall and CPU time. ``--jobs 2`` trains two runs at a time (spawned processes).
A run already completed under ``--run-dir`` (its ``result.json``) is reused, not retrained, so an
interrupted sweep resumes and ``--section opd --run-dir DIR/shared`` reuses the MOPD experts.
``--no-kl`` skips the off-source teacher and the KL probes.
Usage: python benchmarks/mopd.py [--section mopd|opd] [--lrs 3e-5 1e-4 3e-4] [--seeds 0 1 2]
       [--expert-steps 400] [--student-steps 150] [--run-dir DIR] [--threads 1] [--jobs 1]
       [--no-kl]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parent.parent
DOMAINS = {"addition": "+", "subtraction": "-"}
STUDENT = ("train.eval_every=0", "task.eval_per_op=true")
ARMS = ("mopd-sampled", "mopd-topk", "mixrl")


def _train(config, overrides, *, root, name, steps=None, seed=None, threads=1) -> dict:
    """One run (inline or in a pool worker): its run dir, per-domain accuracy, wall and CPU.
    A run of that name already completed under ``root`` (its ``result.json``) is reused."""
    done = sorted(Path(root).glob(f"*-{name}-*/result.json"))
    if done:
        return json.loads(done[-1].read_text())
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore")
    from core.driver import resolve_config, run_training

    cfg = resolve_config(config, overrides, steps=steps, seed=seed)
    t0, c0 = time.time(), time.process_time()
    run_dir, summary = run_training(
        cfg, runs_root=root, telemetry="duckdb", name=name, progress=False
    )
    out = {
        "run_dir": str(run_dir),
        "start": summary["eval_by_domain_start"],
        "end": summary["eval_by_domain_end"],
        "wall_s": time.time() - t0,
        "cpu_s": time.process_time() - c0,
    }
    (run_dir / "result.json").write_text(json.dumps(out))
    print(f"  {Path(root).name}/{name}: {out['end']} ({out['wall_s']:.0f}s)", flush=True)
    return out


def _pretrain_off_source(out, *, steps, seed, threads) -> dict:
    """A clean SFT from another initialisation (same tokenizer): the stronger, off-source one."""
    marker = Path(out) / "result.json"
    if marker.exists():
        return json.loads(marker.read_text())
    torch.set_num_threads(threads)
    from core.config import load_config
    from core.pretrain.arithmetic import pretrain
    from core.tokenizer.tokenizer import Tokenizer

    cfg = load_config(None)
    meta = pretrain(
        out,
        model_cfg=cfg.model,
        task_cfg=cfg.task,
        tok=Tokenizer.load(),
        steps=steps,
        seed=seed,
        teacher_error_rate=0.0,
        log=lambda *_: None,
    )
    print(f"  off-source teacher: greedy held-out {meta['greedy_eval_accuracy']:.3f}", flush=True)
    marker.write_text(json.dumps({"greedy_eval_accuracy": meta["greedy_eval_accuracy"]}))
    return json.loads(marker.read_text())


def run_all(jobs: int, tasks: list[tuple]) -> list:
    """``fn(*args, **kwargs)`` for each ``(fn, args, kwargs)``, ``jobs`` spawned processes at a
    time (inline when ``jobs == 1``); results in task order."""
    if jobs <= 1:
        return [fn(*a, **kw) for fn, a, kw in tasks]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(fn, *a, **kw) for fn, a, kw in tasks]
        return [f.result() for f in futures]


def _expert_task(root, domain, *, steps, per_domain, threads) -> tuple:
    ck = Path(root) / "experts" / domain
    overrides = [f'train.checkpoint_dir="{ck}"', f"train.eval_size={per_domain}", *STUDENT]
    config = REPO / "configs" / f"expert_{domain}.toml"
    kw = {"root": root, "name": f"expert-{domain}", "steps": steps, "threads": threads}
    return _train, (config, overrides), kw


def student_overrides(experts, *, lr, prompts, topk, per_domain) -> dict[str, list[str]]:
    """arm -> overrides (on the default config) of the MOPD (sampled, Top-k) and Mix-RL students;
    the arms differ only in these lines."""
    routes = ", ".join(f'{d} = "{experts[d]}"' for d in DOMAINS)
    common = [*STUDENT, f"train.eval_size={per_domain * len(DOMAINS)}", f"optim.lr={lr}"]
    mopd = [
        *common,
        'algorithm.advantage="opd"',
        "algorithm.group_size=1",
        f"algorithm.prompts_per_step={prompts}",
        f"teachers.routes={{{routes}}}",
    ]
    return {
        "mopd-sampled": mopd + ['teachers.payload="sampled"'],
        "mopd-topk": mopd
        + ['algorithm.opd_loss="topk"', 'teachers.payload="topk"', f"teachers.topk={topk}"],
        "mixrl": [*common, "algorithm.group_size=8", f"algorithm.prompts_per_step={prompts // 8}"],
    }


def _kl_task(root, path, *, label, prompts, seed, threads) -> tuple:
    """A one-step OPD run of the SFT base towards a teacher (``kl-<label>``): its first
    ``teacher_routes`` rows hold the initial per-token KL."""
    overrides = [
        *STUDENT,
        "train.eval_size=16",
        f"algorithm.prompts_per_step={prompts}",
        f'teachers.routes={{addition = "{path}"}}',
    ]
    kw = {"root": root, "name": f"kl-{label}", "steps": 1, "seed": seed, "threads": threads}
    return _train, (REPO / "configs" / "opd_tiny.toml", overrides), kw


def cell_dir(root, lr: float, seed: int) -> Path:
    return Path(root) / "cells" / f"lr{lr:g}-seed{seed}"


def _link(run_dir, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    link = into / Path(run_dir).name
    if not link.exists():
        os.symlink(Path(run_dir).resolve(), link, target_is_directory=True)


def tables(root, arms=ARMS):
    """(normalized table, initial KL per probe) from the runs' telemetry under ``root`` (a cell);
    the SFT base row is the first evaluation of the last arm."""
    from observability import open_runs
    from observability.distill import final_scores, initial_kl, normalized_table

    con = open_runs(root)
    experts = {d: f"expert-{d}" for d in DOMAINS}
    table = normalized_table(final_scores(con), experts=experts, arms=list(arms), base=arms[-1])
    kl = initial_kl(con)
    kl = kl[kl["name"].str.startswith("kl-")].set_index("name")["reverse_kl"].to_dict()
    return table, kl


def markdown(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def section_mopd(args, root) -> dict:
    t0 = time.time()
    shared = Path(root) / "shared"
    th = args.threads
    print("experts and the off-source teacher", flush=True)
    tasks = [
        _expert_task(
            shared, d, steps=args.expert_steps, per_domain=args.eval_per_domain, threads=th
        )
        for d in DOMAINS
    ]
    off = shared / "experts" / "off-source"
    if args.kl:
        kw = {"steps": args.pretrain_steps, "seed": 7, "threads": th}
        tasks.append((_pretrain_off_source, (off,), kw))
    *expert_runs, off_meta = run_all(args.jobs, tasks) + ([] if args.kl else [None])
    experts = {d: shared / "experts" / d for d in DOMAINS}
    print("KL probes and students", flush=True)
    probes = {"same-source": experts["addition"], "off-source": off} if args.kl else {}
    tasks, where = [], []
    for seed in args.seeds:
        for label, path in probes.items():
            kw = {"label": label, "prompts": args.prompts, "seed": seed, "threads": th}
            tasks.append(_kl_task(shared / f"kl-seed{seed}", path, **kw))
            where.append([cell_dir(root, lr, seed) for lr in args.lrs])
    for lr in args.lrs:
        arms = student_overrides(
            experts, lr=lr, prompts=args.prompts, topk=args.topk, per_domain=args.eval_per_domain
        )
        for seed in args.seeds:
            for name, overrides in ((a, arms[a]) for a in args.arms):
                kw = {"root": cell_dir(root, lr, seed), "name": name, "steps": args.student_steps}
                tasks.append((_train, (None, overrides), kw | {"seed": seed, "threads": th}))
    done = run_all(args.jobs, tasks)
    for r, cells in zip(done, where):  # the probes, linked into every cell of their seed
        for cell in cells:
            _link(r["run_dir"], cell)
    sweep, kls, base = {a: {} for a in args.arms}, {}, []
    for lr in args.lrs:
        for seed in args.seeds:
            cell = cell_dir(root, lr, seed)
            for r in expert_runs:
                _link(r["run_dir"], cell)
            table, kl = tables(cell, args.arms)
            rows = table.set_index("arm").to_dict(orient="index")
            base.append(rows["sft-base"]["mean"])
            for arm in args.arms:
                sweep[arm].setdefault(lr, []).append(rows[arm])
            for k, v in kl.items():
                kls.setdefault(k, {})[seed] = v
    means = {a: {lr: [r["mean"] for r in per] for lr, per in s.items()} for a, s in sweep.items()}
    best = {a: stats.best_of_sweep(m) for a, m in means.items()}
    print(f"\nruns under {root} ({time.time() - t0:.0f}s); seeds {args.seeds}\n")
    print("sweep: mean per-domain accuracy / expert, per seed (mean ± sd)")
    print(
        markdown(
            ["arm", "lr", "per seed", "mean ± sd"],
            [
                (a, f"{lr:g}", " / ".join(f"{v:.3f}" for v in m), stats.summary(m).fmt(3))
                for a in args.arms
                for lr, m in means[a].items()
            ],
        )
    )
    rows = [("SFT base", "—", "", "", stats.summary(base).fmt(3))]
    for a in args.arms:
        lr, s = best[a]
        dom = [stats.summary([r[d] for r in sweep[a][lr]]).mean for d in DOMAINS]
        rows.append((a, f"{lr:g}", *(f"{v:.3f}" for v in dom), f"**{s.fmt(3)}**"))
    print("\nbest lr of each arm")
    print(markdown(["arm", "best lr", *DOMAINS, "mean ± sd (min–max, n)"], rows))
    pairs = {}
    for a, b in (("mopd-sampled", "mixrl"), ("mopd-topk", "mixrl"), ("mopd-sampled", "mopd-topk")):
        if a not in args.arms or b not in args.arms:
            continue
        p = stats.paired(best[a][1].values, best[b][1].values)
        pairs[f"{a} - {b}"] = {"diff": p.diff.mean, "interval": p.interval, "t": p.t}
        print(p.fmt(f"{a} (lr {best[a][0]:g})", f"{b} (lr {best[b][0]:g})", 3))
    kl_summary = {k: stats.summary([v[s] for s in args.seeds]) for k, v in kls.items()}
    print("\ninitial per-token KL: " + "; ".join(f"{k} {s.fmt(3)}" for k, s in kl_summary.items()))
    if off_meta:
        print(f"off-source teacher's own greedy accuracy {off_meta['greedy_eval_accuracy']:.3f}")
    return {
        "seeds": list(args.seeds),
        "lrs": list(args.lrs),
        "sweep": {a: {f"{lr:g}": v for lr, v in s.items()} for a, s in sweep.items()},
        "best": {
            a: {"lr": lr, "values": s.values, "mean": s.mean, "sd": s.sd}
            for a, (lr, s) in best.items()
        },
        "paired": pairs,
        "sft_base": base,
        "initial_kl": kls,
        "experts": {d: r["end"] for d, r in zip(DOMAINS, expert_runs)},
        "off_source_accuracy": off_meta and off_meta["greedy_eval_accuracy"],
        "students_cpu_s": sum(r["cpu_s"] for r in done),
        "seconds": time.time() - t0,
    }


def section_opd(args, root) -> dict:
    """The acceptance run: configs/opd_tiny.toml towards a freshly trained addition expert."""
    th = args.threads
    (expert,) = run_all(
        1,
        [
            _expert_task(
                root,
                "addition",
                steps=args.expert_steps,
                per_domain=args.eval_per_domain,
                threads=th,
            )
        ],
    )
    ck = Path(root) / "experts" / "addition"
    overrides = [
        f'teachers.routes={{addition = "{ck}"}}',
        f"train.eval_size={args.eval_per_domain}",
        *STUDENT,
    ]
    config = REPO / "configs" / "opd_tiny.toml"
    runs = run_all(
        args.jobs,
        [
            (
                _train,
                (config, overrides),
                {
                    "root": root,
                    "name": f"opd-seed{s}",
                    "steps": args.student_steps,
                    "seed": s,
                    "threads": th,
                },
            )
            for s in args.seeds
        ],
    )
    target = expert["end"]["addition"]
    per_seed = []
    for seed, r in zip(args.seeds, runs):
        base, end = r["start"]["addition"], r["end"]["addition"]
        closed = (end - base) / (target - base) if target != base else float("nan")
        per_seed.append(
            {
                "seed": seed,
                "base": base,
                "opd": end,
                "gap_closed": closed,
                "wall_s": r["wall_s"],
                "cpu_s": r["cpu_s"],
            }
        )
        print(
            f"seed {seed}: base {base:.3f} -> OPD {end:.3f}; expert {target:.3f}; gap closed {100 * closed:.0f}% in {r['wall_s']:.0f}s wall, {r['cpu_s']:.0f}s CPU"
        )
    gap = stats.summary([p["gap_closed"] for p in per_seed])
    print(
        f"\ngap closed over seeds: {gap.fmt(1, scale=100)} % ({args.student_steps} steps; 95% CI of the mean {100 * gap.interval[0]:.0f}–{100 * gap.interval[1]:.0f}%)"
    )
    return {
        "expert": target,
        "per_seed": per_seed,
        "gap_closed": {"mean": gap.mean, "sd": gap.sd, "interval": gap.interval},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--section", choices=["mopd", "opd"], default="mopd")
    p.add_argument("--lrs", type=float, nargs="+", default=[3e-5, 1e-4, 3e-4])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--expert-steps", type=int, default=400)
    p.add_argument("--student-steps", type=int, default=150)
    p.add_argument("--pretrain-steps", type=int, default=1500)
    p.add_argument("--prompts", type=int, default=64, help="student samples per step")
    p.add_argument("--topk", type=int, default=16)
    p.add_argument("--eval-per-domain", type=int, default=240, help="held-out problems")
    p.add_argument("--threads", type=int, default=1, help="torch threads per training process")
    p.add_argument("--jobs", type=int, default=1, help="training processes at a time")
    p.add_argument("--run-dir", default=None, help="keep the runs here (default: a temp dir)")
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="students")
    p.add_argument(
        "--no-kl", dest="kl", action="store_false", help="no off-source teacher, no KL probes"
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    root = args.run_dir or tempfile.mkdtemp(prefix=f"closedloop-{args.section}-")
    out = (section_mopd if args.section == "mopd" else section_opd)(args, root)
    (Path(root) / f"{args.section}.json").write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
