"""Train-infer gap benchmark (issue 7, the INT4 QAT seed's comparison) on the tiny model, CPU.

GRPO + IcePop for the same steps, prompts and sampling seed in five modes, differing only in
the actor's QAT and the rollout engine's weights: (a) fp32 train -> bf16 rollout, (b) fp32 ->
FP8 (e4m3, per channel) rollout, (c) no QAT -> INT4 W4A16 rollout, (d) INT4 QAT -> INT4 W4A16,
(e) INT4 QAT -> bf16 rollout. The actor always keeps fp32 master weights and computes in fp32
(the seed trains in bf16); every rollout engine computes in bf16. Per step: mean
|train_logp - rollout_logp| over action tokens (|Δlogp|), the probe (the same on a fixed batch
after each sync), reward. Each (mode, seed) runs in its own spawned process (``--jobs`` at once,
``--threads`` torch threads each); per mode mean ± sd over seeds, the key ratios per seed
((d)/(a): QAT + INT4 against bf16; (c)/(d): INT4 without QAT against with) with their spread,
and the paired difference (d) − (a) with its 95% interval (``benchmarks/stats.py``). No held-out
accuracy: it is a learning outcome these few steps do not separate (see benchmarks/README.md).
Also the rollout engine's weight bytes per mode against bf16, and a Plotly figure of the curves
(mean over seeds, band = min–max).
Usage: python benchmarks/train_infer_gap.py [--steps 30] [--seeds 0 1 2] [--modes abcde]
       [--out docs/train_infer_gap.html] [--json F] [--report F]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402

warnings.filterwarnings("ignore")

MODES = {
    "a": ("fp32 train -> bf16 rollout", ['rollout.precision="bf16"']),
    "b": ("fp32 train -> FP8 rollout", ['rollout.precision="fp8"']),
    "c": ("no QAT -> INT4 rollout", ['rollout.precision="w4a16"']),
    "d": ("INT4 QAT -> INT4 rollout", ['rollout.precision="w4a16"', "quant.qat=true"]),
    "e": ("INT4 QAT -> bf16 rollout", ['rollout.precision="bf16"', "quant.qat=true"]),
}
REPO = Path(__file__).resolve().parent.parent
KEYS = ("mismatch_abs_mean", "probe", "reward_mean", "masked_fraction")
KEYS_SCALAR = ("dlogp", "last", "probe", "reward", "masked")


def weight_bytes(engine, names: list[str]) -> tuple[int, int, int, int]:
    """(quantizable-linear bytes, their bf16 bytes, all engine weight bytes, all as bf16)."""
    lin = lin_bf16 = total = total_bf16 = 0
    for name, w in engine.weights.items():
        if isinstance(w, torch.Tensor):
            nbytes, numel = w.numel() * w.element_size(), w.numel()
        else:
            nbytes, numel = w.nbytes, w.to_quantized().codes.numel()
        total, total_bf16 = total + nbytes, total_bf16 + 2 * numel
        if name in names:
            lin, lin_bf16 = lin + nbytes, lin_bf16 + 2 * numel
    return lin, lin_bf16, total, total_bf16


def run_mode(key: str, seed: int, *, steps: int, threads: int, extra: list[str]) -> dict:
    """One mode and seed (in its own process): the per-step metrics, weight bytes, timings."""
    torch.set_num_threads(threads)
    from core.config import load_config
    from core.loops.grpo import train_step
    from core.loops.session import Session
    from core.quant.wiring import quantized_names
    from observability.telemetry import NullTelemetry

    label, overrides = MODES[key]
    fixed = [f"train.steps={steps}", f"train.seed={seed}", "train.probe_every=1"]
    cfg = load_config(None, [*overrides, *fixed, *extra])  # the probe after every sync
    t0, c0 = time.time(), time.process_time()
    s = Session(cfg, NullTelemetry())
    out = {"key": key, "seed": seed, "label": label, "steps": []}
    out["bytes"] = weight_bytes(s.engine, quantized_names(s.model_cfg))
    for step in range(steps):
        m = train_step(s, step)
        m["probe"] = s.last_sync.probe_mismatch_abs_mean
        out["steps"].append({"step": m["step"], **{k: m[k] for k in KEYS}})
    out["wall"], out["cpu"] = time.time() - t0, time.process_time() - c0
    out["load"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return out


def measure(args) -> list[dict]:
    first = [k for k in "acd" if k in args.modes]  # the key claim's modes first, then the rest
    rest = [k for k in args.modes if k not in first]
    jobs = [(k, s) for group in (first, rest) for s in args.seeds for k in group]
    ctx = multiprocessing.get_context("spawn")
    kw = {"steps": args.steps, "threads": args.threads, "extra": args.set}
    # spawned workers reused across runs (imports under load cost minutes); each run builds its
    # own session
    with ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
        futs = [pool.submit(run_mode, k, seed, **kw) for k, seed in jobs]
        results = []
        for f in as_completed(futs):
            r = f.result()
            results.append(r)
            if args.json:  # after every run: a cut-short programme keeps what it measured
                Path(args.json).write_text(json.dumps(results))
            d = mean(m["mismatch_abs_mean"] for m in r["steps"])
            print(
                f"({r['key']}) seed {r['seed']}: |dlogp| {d:.4f} in {r['wall']:.0f} s wall, "
                f"{r['cpu']:.0f} s CPU, load {r['load']}",
                flush=True,
            )
    return results


def mean(xs) -> float:
    xs = [x for x in xs if x is not None]
    return sum(xs) / max(len(xs), 1)


def per_seed(results: list[dict]) -> dict[str, dict[int, dict[str, float]]]:
    """mode -> seed -> the run's scalars: step means of |Δlogp| (all, last third), probe, reward,
    masked fraction."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for r in results:
        st = r["steps"]
        tail = st[-max(len(st) // 3, 1) :]
        out.setdefault(r["key"], {})[r["seed"]] = {
            "dlogp": mean(m["mismatch_abs_mean"] for m in st),
            "last": mean(m["mismatch_abs_mean"] for m in tail),
            "probe": mean(m["probe"] for m in st),
            "reward": mean(m["reward_mean"] for m in st),
            "masked": mean(m["masked_fraction"] for m in st),
        }
    return out


def report(results: list[dict]) -> None:
    keys = [k for k in MODES if any(r["key"] == k for r in results)]
    steps = min(len(r["steps"]) for r in results)
    runs = {(r["key"], r["seed"]): r for r in results}
    sc = per_seed(results)  # mode -> seed -> scalars; a cut-short programme may miss some
    seeds = sorted(set.intersection(*(set(sc[k]) for k in keys)))  # seeds every mode has
    print(
        f"\nper-step |train_logp - rollout_logp| (action tokens) / reward, mean over seeds {seeds}"
    )
    print("step " + "".join(f"{'(' + k + ') dlogp':>12s}{'reward':>8s}" for k in keys))
    for i in range(steps):
        cells = "".join(
            f"{mean(runs[k, s]['steps'][i]['mismatch_abs_mean'] for s in seeds):12.4f}"
            f"{mean(runs[k, s]['steps'][i]['reward_mean'] for s in seeds):8.3f}"
            for k in keys
        )
        print(f"{i:4d} {cells}")
    print(
        f"\n{steps} steps: mean ± sd (min–max, n seeds) over seeds of each run's step mean; "
        f"'last' = the last {max(steps // 3, 1)} steps"
    )
    print("| mode | \\|Δlogp\\| | last | probe | reward | masked | CPU s/step |")
    print("|---|---|---|---|---|---|---|")
    for k in keys:
        col = {m: stats.summary([v[m] for v in sc[k].values()]) for m in KEYS_SCALAR}
        cpu = mean(runs[k, s]["cpu"] / steps for s in sc[k])
        print(
            f"| ({k}) {MODES[k][0]} | {col['dlogp'].fmt(4)} | {col['last'].fmt(4)} | "
            f"{col['probe'].fmt(4)} | {col['reward'].fmt(3)} | {col['masked'].fmt(3)} | "
            f"{cpu:.2f} |"
        )
    pairs = [("d", "a"), ("c", "d"), ("c", "a"), ("b", "a"), ("e", "a"), ("e", "d")]
    pairs = [(x, y) for x, y in pairs if set(sc.get(x, ())) & set(sc.get(y, ()))]
    if pairs:
        print("\nratios per seed, mean ± sd (min–max); paired difference with its 95% interval")
        print("| ratio | \\|Δlogp\\| | probe | \\|Δlogp\\| difference (paired, 95% CI) |")
        print("|---|---|---|---|")
    for x, y in pairs:
        both = sorted(set(sc[x]) & set(sc[y]))
        rd = stats.summary([sc[x][s]["dlogp"] / sc[y][s]["dlogp"] for s in both])
        rp = stats.summary([sc[x][s]["probe"] / sc[y][s]["probe"] for s in both])
        diff = "—"
        if len(both) >= 2:
            p = stats.paired([sc[x][s]["dlogp"] for s in both], [sc[y][s]["dlogp"] for s in both])
            diff = p.fmt(f"({x})", f"({y})", digits=4)
        print(f"| ({x}) / ({y}) | {rd.fmt(2)} | {rp.fmt(2)} | {diff} |")
    print("\nrollout engine weight bytes (the rollout engine keeps embeddings/head/norms in bf16)")
    print(f"{'mode':28s}{'linears':>10s}{'vs bf16':>9s}{'all weights':>13s}{'vs bf16':>9s}")
    for k in keys:
        lin, lin_bf16, total, total_bf16 = next(r["bytes"] for r in results if r["key"] == k)
        print(
            f"({k}) {MODES[k][0]:24s}{lin:10d}{lin / lin_bf16:9.3f}x"
            f"{total:12d}{total / total_bf16:9.3f}x"
        )
    print("load averages at the end of each run: " + "; ".join(r["load"] for r in results))


def figure(results: list[dict], path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("mean |train_logp − rollout_logp| (action tokens)", "reward (sampled)"),
    )
    seeds = sorted({r["seed"] for r in results})
    for k in MODES:
        rs = [r for r in results if r["key"] == k]
        if not rs:
            continue
        n = min(len(r["steps"]) for r in rs)
        x = list(range(n))
        name = f"({k}) {MODES[k][0]}"
        for col, metric in ((1, "mismatch_abs_mean"), (2, "reward_mean")):
            ys = [[r["steps"][i][metric] for r in rs] for i in x]
            band_x = x + x[::-1]
            band_y = [max(y) for y in ys] + [min(y) for y in ys][::-1]
            fig.add_trace(
                go.Scatter(
                    x=band_x, y=band_y, fill="toself", opacity=0.15, line={"width": 0},
                    legendgroup=k, showlegend=False, hoverinfo="skip", name=name,
                ),
                row=1,
                col=col,
            )  # fmt: skip
            fig.add_trace(
                go.Scatter(
                    x=x, y=[mean(y) for y in ys], name=name, legendgroup=k, showlegend=col == 1
                ),
                row=1,
                col=col,
            )
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="GRPO step")
    fig.update_layout(
        title=f"Train-infer gap on the tiny model (fp32 actor; bf16-compute rollout); "
        f"mean over seeds {seeds}, band = min–max"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs="cdn")
    print(f"\nfigure: {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--modes", default="abcde", help="subset of abcde")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one process each)")
    ap.add_argument("--set", action="append", default=[], help="config override section.key=value")
    ap.add_argument("--out", default=str(REPO / "docs" / "train_infer_gap.html"))
    ap.add_argument("--json", default=None, help="write every run's per-step metrics here")
    ap.add_argument(
        "--report", nargs="+", default=None, help="only report (and plot) --json files (merged)"
    )
    args = ap.parse_args()
    if args.report:
        results = [r for f in args.report for r in json.loads(Path(f).read_text())]
    else:
        results = measure(args)
    report(results)
    if args.out:
        figure(results, Path(args.out))


if __name__ == "__main__":
    main()
