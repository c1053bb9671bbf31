"""What benchmarks/vs_trl.py prints: one seed's run, and the summary over seeds (held-out gains as
mean ± sd with the paired difference and its 95% interval, written as a tie when it spans 0; step
time ratios; the step's phases on each side and which phase carries the difference).

Timing aggregates leave out the first step (warm-up) when a run has more than two steps.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402
from vs_trl_phases import PHASES  # noqa: E402

NAMES = {"trl": "TRL", "closedloop": "closedloop", "closedloop_noshare": "cl, no prefix share"}


def _kept(xs: list) -> list:
    return xs[1:] if len(xs) > 2 else xs


def arm_timing(r: dict, arm: str) -> dict:
    """One run's step time for ``arm``: wall median / mean, CPU mean (closedloop: plus its
    telemetry writer thread's CPU per step, charged to its telemetry phase), phase means (s)
    by clock (``wall``, ``cpu``)."""
    t = _kept(r["timings"][arm])
    wall, cpu = [w for w, _ in t], [c for _, c in t]
    extra = sum(r["threads_cpu_s"].get(arm, {}).values()) / max(r["steps"], 1)
    ph = _kept(r["phases"][arm])
    mean = {c: {p: statistics.fmean(x[p][i] for x in ph) for p in (*PHASES, "total")}
            for i, c in enumerate(("wall", "cpu"))}  # fmt: skip
    mean["cpu"]["telemetry"] += extra
    mean["cpu"]["total"] += extra
    return {
        "wall_median": statistics.median(wall),
        "wall_mean": statistics.fmean(wall),
        "cpu_mean": statistics.fmean(cpu) + extra,
        "writer_cpu": extra,
        "phases": mean,
    }


def ratio(r: dict, arm: str, ref: str = "trl") -> dict:
    """``arm`` / ``ref`` step time in one run: median of paired steps (wall), means (wall, CPU)."""
    a, b = _kept(r["timings"][arm]), _kept(r["timings"][ref])
    ta, tb = arm_timing(r, arm), arm_timing(r, ref)
    return {
        "wall_paired_median": statistics.median(x[0] / y[0] for x, y in zip(a, b, strict=True)),
        "wall_means": ta["wall_mean"] / tb["wall_mean"],
        "cpu_means": ta["cpu_mean"] / tb["cpu_mean"],
    }


def arms(r: dict) -> list[str]:
    return [a for a in NAMES if a in r["timings"]]


def gain(r: dict, arm: str) -> float:
    a = r["accuracy"]
    return a[f"{arm}_end"] - a["base"]


def report_run(r: dict) -> None:
    a = r["accuracy"]
    print(
        f"seed {r['seed']}: {r['steps']} steps x {r['samples_per_step']} samples, engine "
        f"{r['engine']}, threads {r['threads']}, load average {r['load_avg'][0]:.2f}; held-out "
        f"greedy (n={r['eval_size']}) base {a['base']:.3f}"
    )
    for arm in arms(r):
        t = arm_timing(r, arm)
        ph = ", ".join(
            f"{p} {1e3 * t['phases']['wall'][p]:.1f}/{1e3 * t['phases']['cpu'][p]:.1f}"
            for p in PHASES
        )
        line = (
            f"  {NAMES[arm]:20s} -> {a[f'{arm}_end']:.3f} ({100 * gain(r, arm):+.1f}); step wall "
            f"{1e3 * t['wall_median']:.1f} ms (median), CPU {1e3 * t['cpu_mean']:.1f} ms "
            f"(writer {1e3 * t['writer_cpu']:.1f}); phases wall/CPU ms: {ph}"
        )
        if arm != "trl":
            q = ratio(r, arm)
            line += f"; vs TRL wall {q['wall_paired_median']:.2f}x, CPU {q['cpu_means']:.2f}x"
        print(line)
    tracked = sum(sum(c for _, c in v) for v in r["timings"].values())
    tracked += sum(sum(v.values()) for v in r["threads_cpu_s"].values())
    print(
        f"  process CPU {r['process_cpu_s']:.1f} s over training, {tracked:.1f} s of it on the "
        "timed threads (the rest: threads outside Python's view, e.g. DuckDB's, and callbacks)"
    )
    c = r["recorded"]["closedloop"]
    print(
        f"  closedloop records train and rollout log-probs of {c['with_train_and_rollout_logp']}"
        f"/{c['action_token_rows']} action tokens (|dlogp| mean {c['token_abs_dlogp_mean']:.1e}, "
        f"max {c['token_abs_dlogp_max']:.1e}); TRL logs {len(r['recorded']['trl']['logged_keys'])}"
        " scalar keys a step"
    )
    if r.get("trl_run_dir"):
        print(f"  TRL side recorded by closedloop: {r['trl_run_dir']} (closedloop gate RUN)")


def summarize(runs: list[dict]) -> dict:
    """Over seeds: gains, paired gain differences, step ratios, phase means and phase leads."""
    names = arms(runs[0])
    out = {
        "seeds": [r["seed"] for r in runs],
        "load_avg": [r["load_avg"][0] for r in runs],
        "gain_points": {a: stats.summary([100 * gain(r, a) for r in runs]) for a in names},
        "paired_gain_points": {},
        "ratio_vs_trl": {},
        "phase_ms": {},
        "phase_lead_ms": {},
    }
    for a in names[1:]:
        out["paired_gain_points"][f"{a} - trl"] = stats.paired(
            [100 * gain(r, a) for r in runs], [100 * gain(r, "trl") for r in runs]
        )
        out["ratio_vs_trl"][a] = {
            k: stats.summary([ratio(r, a)[k] for r in runs])
            for k in ("wall_paired_median", "wall_means", "cpu_means")
        }
    for a in names:
        out["phase_ms"][a] = {
            c: {
                p: stats.summary([1e3 * arm_timing(r, a)["phases"][c][p] for r in runs])
                for p in (*PHASES, "total")
            }
            for c in ("wall", "cpu")
        }
    pairs = [("trl", "closedloop")] + (
        [("closedloop_noshare", "closedloop")] if "closedloop_noshare" in names else []
    )
    for slow, fast in pairs:  # how many ms each phase of `fast` saves against `slow`
        out["phase_lead_ms"][f"{slow} - {fast}"] = {
            c: {
                p: stats.paired(
                    [1e3 * arm_timing(r, slow)["phases"][c][p] for r in runs],
                    [1e3 * arm_timing(r, fast)["phases"][c][p] for r in runs],
                )
                for p in (*PHASES, "total")
            }
            for c in ("wall", "cpu")
        }
    return out


def report_summary(s: dict) -> None:
    print(f"\nover seeds {s['seeds']} (load average at each: {s['load_avg']}):")
    print("held-out gain, points (mean ± sd (min–max, n)):")
    for a, g in s["gain_points"].items():
        print(f"  {NAMES[a]:20s} {g.fmt(1)}")
    for k, p in s["paired_gain_points"].items():
        a, b = k.split(" - ")
        print(f"  {p.fmt(NAMES[a], NAMES[b], 1)}")
    print("step time vs TRL (per-seed ratios: mean ± sd (min–max)):")
    for a, rs in s["ratio_vs_trl"].items():
        print(
            f"  {NAMES[a]:20s} wall {rs['wall_paired_median'].fmt(2)} (median of paired steps); "
            f"wall {rs['wall_means'].fmt(2)} (means); CPU {rs['cpu_means'].fmt(2)} (means)"
        )
    for c in ("cpu", "wall"):
        print(f"step phases, {c} ms (mean over seeds ± sd):")
        for a, ph in s["phase_ms"].items():
            cells = ", ".join(f"{p} {x.mean:.1f} ± {x.sd:.1f}" for p, x in ph[c].items())
            print(f"  {NAMES[a]:20s} {cells}")
    for k, by_clock in s["phase_lead_ms"].items():
        a, b = (NAMES[x] for x in k.split(" - "))
        for c, ph in by_clock.items():
            print(f"where {b} saves against {a}, {c} ms per step (paired over seeds):")
            for p, d in ph.items():
                lo, hi = d.interval
                says = f"{b} shorter" if lo > 0 else f"{a} shorter" if hi < 0 else "tie"
                print(
                    f"  {p:9s} {a} − {b} = {d.diff.mean:+.1f} [{lo:+.1f}, {hi:+.1f}] 95% CI, "
                    f"t = {d.t:.2f}: {says}"
                )


def to_json(s: dict) -> dict:
    """The summary with its stats objects as plain numbers."""

    def conv(x):
        if isinstance(x, stats.Summary):
            return {"mean": x.mean, "sd": x.sd, "n": x.n, "min": x.lo, "max": x.hi,
                    "ci95": list(x.interval)}  # fmt: skip
        if isinstance(x, stats.Paired):
            return {"diff": conv(x.diff), "t": x.t, "ci95": list(x.interval)}
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        return x

    return conv(s)
