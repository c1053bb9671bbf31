"""MOPD on our task world: the paper's table side by side in one run, from one SFT base.

1. Domain experts: GRPO + IcePop from the shipped SFT base on one domain each (addition,
   subtraction; ``configs/expert_*.toml``), ``--expert-steps`` steps.
2. An off-source teacher: a clean SFT (no flawed demonstrations) from another initialisation
   (``closedloop pretrain --seed 7 --teacher-error-rate 0``), stronger than the experts.
3. Students, all from the same SFT base at equal student samples per step (64):
   MOPD sampled (OPD advantage, group size 1 × 64 prompts, each sample hard-routed to its
   domain's expert), MOPD Top-k (the Top-k reverse KL, K = ``--topk``), Mix-RL (GRPO on the mixed
   domains, 8 prompts × 8, the experts' recipe), and the SFT base itself (the students' step 0).
4. Per-domain greedy held-out accuracy (the same ``--eval-per-domain`` problems of each domain in
   every run: ``task.eval_per_op``) normalized by that domain's expert; the initial per-token KL
   (sampled reverse-KL estimate on the SFT base's own addition samples) to the same-source
   addition expert and to the off-source teacher. The table is computed from the runs' telemetry
   (``observability.distill``), as the notebook computes it.
Every run keeps DuckDB telemetry under ``--run-dir`` (named ``expert-*``, ``mopd-*``,
``mixrl``, ``kl-*``): ``notebooks/opd_vs_mixrl.ipynb`` reads them. ``--section opd`` instead
measures the acceptance run of ``configs/opd_tiny.toml`` (OPD alone, group size 1, towards the
addition expert): the share of the base → expert held-out gap it closes, and its wall time.
Usage: python benchmarks/mopd.py [--section mopd|opd] [--expert-steps 400] [--student-steps 150]
       [--run-dir DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parent.parent
DOMAINS = {"addition": "+", "subtraction": "-"}
STUDENT = ("train.eval_every=0", "task.eval_per_op=true")
ARMS = ("mopd-sampled", "mopd-topk", "mixrl")


def _train(config, overrides, *, root, name, steps=None):
    from core.config import load_config
    from core.driver import run_training

    extra = [*overrides, *([f"train.steps={steps}"] if steps is not None else [])]
    cfg = load_config(config, extra)
    t0 = time.time()
    run_dir, summary = run_training(
        cfg, runs_root=root, telemetry="duckdb", name=name, progress=False
    )
    summary["wall_s"] = time.time() - t0
    print(f"  {name}: {summary['eval_by_domain_end']} ({summary['wall_s']:.0f}s)", flush=True)
    return run_dir, summary


def train_experts(root, *, steps, per_domain):
    """domain -> (checkpoint dir, summary) of the GRPO domain experts."""
    out = {}
    for domain in DOMAINS:
        ck = Path(root) / "experts" / domain
        _, summary = _train(
            REPO / "configs" / f"expert_{domain}.toml",
            [f'train.checkpoint_dir="{ck}"', f"train.eval_size={per_domain}", *STUDENT],
            root=root,
            name=f"expert-{domain}",
            steps=steps,
        )
        out[domain] = (ck, summary)
    return out


def off_source_teacher(root, *, steps, seed=7):
    """A clean SFT from another initialisation (same tokenizer): the stronger, off-source one."""
    from core.config import load_config
    from core.pretrain.arithmetic import pretrain
    from core.tokenizer.tokenizer import Tokenizer

    out = Path(root) / "experts" / "off-source"
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
    return out, meta


def students(root, experts, *, steps, prompts, topk, per_domain):
    """name -> summary of the MOPD (sampled, Top-k) and Mix-RL students."""
    routes = ", ".join(f'{d} = "{experts[d][0]}"' for d in DOMAINS)
    common = [*STUDENT, f"train.eval_size={per_domain * len(DOMAINS)}"]
    mopd = [
        *common,
        'algorithm.advantage="opd"',
        "algorithm.group_size=1",
        f"algorithm.prompts_per_step={prompts}",
        "optim.lr=1e-4",
        f"teachers.routes={{{routes}}}",
    ]
    arms = {
        "mopd-sampled": mopd + ['teachers.payload="sampled"'],
        "mopd-topk": mopd
        + ['algorithm.opd_loss="topk"', 'teachers.payload="topk"', f"teachers.topk={topk}"],
        "mixrl": [*common, "algorithm.group_size=8", f"algorithm.prompts_per_step={prompts // 8}"],
    }
    return {
        name: _train(None, overrides, root=root, name=name, steps=steps)[1]
        for name, overrides in arms.items()
    }


def kl_probes(root, teachers, *, prompts) -> None:
    """One-step OPD runs of the SFT base towards each teacher (``kl-<label>``): their first
    ``teacher_routes`` rows hold the initial per-token KL."""
    for label, path in teachers.items():
        _train(
            REPO / "configs" / "opd_tiny.toml",
            [
                *STUDENT,
                "train.eval_size=16",
                f"algorithm.prompts_per_step={prompts}",
                f'teachers.routes={{addition = "{path}"}}',
            ],
            root=root,
            name=f"kl-{label}",
            steps=1,
        )


def tables(root):
    """(normalized table, initial KL per probe) from the runs' telemetry under ``root``."""
    from observability import open_runs
    from observability.distill import final_scores, initial_kl, normalized_table

    con = open_runs(root)
    experts = {d: f"expert-{d}" for d in DOMAINS}
    table = normalized_table(final_scores(con), experts=experts, arms=list(ARMS), base=ARMS[-1])
    kl = initial_kl(con)
    kl = kl[kl["name"].str.startswith("kl-")].set_index("name")["reverse_kl"].to_dict()
    return table, kl


def markdown(table) -> str:
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in table.itertuples(index=False):
        cells = [v if isinstance(v, str) else f"{v:.4f}" for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def section_mopd(args, root) -> dict:
    t0 = time.time()
    print("experts", flush=True)
    experts = train_experts(root, steps=args.expert_steps, per_domain=args.eval_per_domain)
    off, off_meta = off_source_teacher(root, steps=args.pretrain_steps)
    print("students", flush=True)
    students(
        root,
        experts,
        steps=args.student_steps,
        prompts=args.prompts,
        topk=args.topk,
        per_domain=args.eval_per_domain,
    )
    kl_probes(
        root, {"same-source": experts["addition"][0], "off-source": off}, prompts=args.prompts
    )
    table, kl = tables(root)
    print(f"\nruns under {root} ({time.time() - t0:.0f}s)\n")
    print(markdown(table))
    print(
        f"\ninitial per-token KL: {kl} (off-source teacher's own greedy accuracy "
        f"{off_meta['greedy_eval_accuracy']:.3f})"
    )
    return {
        "table": table.to_dict(orient="records"),
        "initial_kl": kl,
        "seconds": time.time() - t0,
    }


def section_opd(args, root) -> dict:
    """The acceptance run: configs/opd_tiny.toml towards a freshly trained addition expert."""
    experts = train_experts(root, steps=args.expert_steps, per_domain=args.eval_per_domain)
    ck, expert = experts["addition"]
    t0 = time.time()
    _, s = _train(
        REPO / "configs" / "opd_tiny.toml",
        [
            f'teachers.routes={{addition = "{ck}"}}',
            f"train.eval_size={args.eval_per_domain}",
            *STUDENT,
        ],
        root=root,
        name="opd",
        steps=args.student_steps,
    )
    wall = time.time() - t0
    base = s["eval_by_domain_start"]["addition"]
    end = s["eval_by_domain_end"]["addition"]
    target = expert["eval_by_domain_end"]["addition"]
    closed = (end - base) / (target - base) if target != base else float("nan")
    print(
        f"\naddition held-out: base {base:.3f} -> OPD {end:.3f}; expert {target:.3f}; "
        f"gap closed {100 * closed:.0f}% in {wall:.0f}s ({args.student_steps} steps)"
    )
    return {"base": base, "opd": end, "expert": target, "gap_closed": closed, "wall_s": wall}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--section", choices=["mopd", "opd"], default="mopd")
    p.add_argument("--expert-steps", type=int, default=400)
    p.add_argument("--student-steps", type=int, default=150)
    p.add_argument("--pretrain-steps", type=int, default=1500)
    p.add_argument("--prompts", type=int, default=64, help="student samples per step")
    p.add_argument("--topk", type=int, default=16)
    p.add_argument("--eval-per-domain", type=int, default=240, help="held-out problems")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--run-dir", default=None, help="keep the runs here (default: a temp dir)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    root = args.run_dir or tempfile.mkdtemp(prefix=f"closedloop-{args.section}-")
    out = (section_mopd if args.section == "mopd" else section_opd)(args, root)
    (Path(root) / f"{args.section}.json").write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
