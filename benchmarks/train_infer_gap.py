"""Train-infer gap benchmark (issue 7, the INT4 QAT seed's comparison) on the tiny model, CPU.

GRPO + IcePop for the same steps, prompts and sampling seed in five modes, differing only in
the actor's QAT and the rollout engine's weights: (a) fp32 train -> bf16 rollout, (b) fp32 ->
FP8 (e4m3, per channel) rollout, (c) no QAT -> INT4 W4A16 rollout, (d) INT4 QAT -> INT4 W4A16,
(e) INT4 QAT -> bf16 rollout. The actor always keeps fp32 master weights and computes in fp32
(the seed trains in bf16); every rollout engine computes in bf16. Prints per-step mean
|train_logp - rollout_logp| over action tokens and reward, a summary table, the rollout engine's
weight bytes per mode against bf16, and writes a Plotly figure of the curves.
Usage: python benchmarks/train_infer_gap.py [--steps 30] [--modes abcde] [--out docs/...html]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")

MODES = {
    "a": ("fp32 train -> bf16 rollout", ['rollout.precision="bf16"']),
    "b": ("fp32 train -> FP8 rollout", ['rollout.precision="fp8"']),
    "c": ("no QAT -> INT4 rollout", ['rollout.precision="w4a16"']),
    "d": ("INT4 QAT -> INT4 rollout", ['rollout.precision="w4a16"', "quant.qat=true"]),
    "e": ("INT4 QAT -> bf16 rollout", ['rollout.precision="bf16"', "quant.qat=true"]),
}
REPO = Path(__file__).resolve().parent.parent


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


def run_mode(key: str, args) -> dict:
    from core.config import load_config
    from core.loops.evaluate import greedy_accuracy
    from core.loops.grpo import train_step
    from core.loops.session import Session
    from core.quant.wiring import quantized_names
    from observability.telemetry import NullTelemetry

    label, overrides = MODES[key]
    steps = [f"train.steps={args.steps}", "train.probe_every=1"]  # the probe after every sync
    cfg = load_config(None, [*overrides, *steps, *args.set])
    s = Session(cfg, NullTelemetry())

    def acc() -> float:
        return greedy_accuracy(
            s.engine,
            s.envs.eval_set(args.eval_size),
            tok=s.tok,
            max_new_tokens=cfg.rollout.max_new_tokens,
        )["accuracy"]

    out = {"key": key, "label": label, "acc0": acc(), "steps": []}
    out["bytes"] = weight_bytes(s.engine, quantized_names(s.model_cfg))
    t0 = time.time()
    for step in range(args.steps):
        m = train_step(s, step)
        m["probe"] = s.last_sync.probe_mismatch_abs_mean
        out["steps"].append(m)
        print(
            f"  ({key}) step {step:3d}  |dlogp| {m['mismatch_abs_mean']:.4f}  "
            f"reward {m['reward_mean']:.3f}  masked {m['masked_fraction']:.3f}",
            flush=True,
        )
    out["seconds"] = time.time() - t0
    out["acc1"] = acc()
    return out


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / max(len(xs), 1)


def report(results: list[dict], steps: int) -> None:
    keys = [r["key"] for r in results]
    print("\nper-step mean |train_logp - rollout_logp| (action tokens) / reward")
    print("step " + "".join(f"{'(' + k + ') dlogp':>12s}{'reward':>8s}" for k in keys))
    for i in range(steps):
        cells = "".join(
            f"{r['steps'][i]['mismatch_abs_mean']:12.4f}{r['steps'][i]['reward_mean']:8.3f}"
            for r in results
        )
        print(f"{i:4d} {cells}")
    tail = max(steps // 3, 1)
    print(f"\nsummary ({steps} steps; 'last' = mean of the last {tail} steps)")
    head = (
        f"{'mode':28s}{'dlogp mean':>11s}{'last':>8s}{'probe':>8s}{'reward':>8s}{'last':>7s}"
        f"{'masked':>8s}{'acc0':>6s}{'acc1':>6s}{'s/step':>7s}"
    )
    print(head)
    for r in results:
        st = r["steps"]
        print(
            f"({r['key']}) {r['label']:24s}{mean(m['mismatch_abs_mean'] for m in st):11.4f}"
            f"{mean(m['mismatch_abs_mean'] for m in st[-tail:]):8.4f}"
            f"{mean(m['probe'] for m in st):8.4f}"
            f"{mean(m['reward_mean'] for m in st):8.3f}{mean(m['reward_mean'] for m in st[-tail:]):7.3f}"
            f"{mean(m['masked_fraction'] for m in st):8.3f}{r['acc0']:6.3f}{r['acc1']:6.3f}"
            f"{r['seconds'] / max(steps, 1):7.2f}"
        )
    print("\nrollout engine weight bytes (the rollout engine keeps embeddings/head/norms in bf16)")
    print(f"{'mode':28s}{'linears':>10s}{'vs bf16':>9s}{'all weights':>13s}{'vs bf16':>9s}")
    for r in results:
        lin, lin_bf16, total, total_bf16 = r["bytes"]
        print(
            f"({r['key']}) {r['label']:24s}{lin:10d}{lin / lin_bf16:9.3f}x"
            f"{total:12d}{total / total_bf16:9.3f}x"
        )


def figure(results: list[dict], path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("mean |train_logp − rollout_logp| (action tokens)", "reward (sampled)"),
    )
    for r in results:
        x = [m["step"] for m in r["steps"]]
        name = f"({r['key']}) {r['label']}"
        y1 = [m["mismatch_abs_mean"] for m in r["steps"]]
        y2 = [m["reward_mean"] for m in r["steps"]]
        fig.add_trace(go.Scatter(x=x, y=y1, name=name, legendgroup=r["key"]), row=1, col=1)
        fig.add_trace(
            go.Scatter(x=x, y=y2, name=name, legendgroup=r["key"], showlegend=False), row=1, col=2
        )
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="GRPO step")
    fig.update_layout(title="Train-infer gap on the tiny model (fp32 actor; bf16-compute rollout)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs="cdn")
    print(f"\nfigure: {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--modes", default="abcde", help="subset of abcde")
    ap.add_argument("--eval-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="config override section.key=value")
    ap.add_argument("--out", default=str(REPO / "docs" / "train_infer_gap.html"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for key in args.modes:
        print(f"mode ({key}) {MODES[key][0]}", flush=True)
        results.append(run_mode(key, args))
    report(results, args.steps)
    if args.out:
        figure(results, Path(args.out))


if __name__ == "__main__":
    main()
