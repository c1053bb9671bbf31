"""vLLM in the closed loop (issue 34): the train-inference gap with vLLM as the rollout engine,
and where each engine wins on speed.

Sections (``--only gap,speed,grpo``):
- ``gap``: GRPO + IcePop for ``--steps`` steps with the same seed, prompts and sampling, the
  megatron actor against each rollout engine (embedded | vLLM) at each precision (fp32, bf16 and
  the quantized formats, which vLLM serves as their dequantized bf16 weights); per action token
  |train − rollout logp|: mean / p99 / max, and the IcePop-masked fraction, from the run's
  telemetry (``tokens``).
- ``speed``: rollout throughput (generated tokens / s, wall, one request batch) and weight-load
  time, embedded vs vLLM, side by side in one process, at the tiny size (64 prompts × 6 tokens) and
  at ~30 M parameters (64 prompts × up to 256 tokens, random weights, EOS the last id, so most
  requests decode all 256; tokens/s counts the tokens generated). Rounds interleave the engines; medians are printed.
- ``grpo``: ``configs/grpo_tiny.toml`` with ``rollout.engine="vllm"`` (40 steps): held-out gain
  and the gate's verdict.
Usage: python benchmarks/vllm_engine.py [--only gap,speed,grpo] [--steps 10] [--rounds 3]
    [--precisions fp32,bf16,w4a16,w8a16,fp8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "bf16", "w4a16", "w8a16", "fp8")


def gap(args) -> None:
    from core.config import load_config
    from core.driver import run_training
    from observability import open_run

    print(f"\n== train-inference gap ({args.steps} GRPO steps, seed 0, action tokens) ==")
    print(f"{'engine':9s}{'precision':10s}{'mean':>10s}{'p99':>10s}{'max':>10s}{'masked':>9s}")
    root = Path(tempfile.mkdtemp(prefix="vllm-gap-"))
    for precision in args.precisions.split(","):
        for engine in ("embedded", "vllm"):
            cfg = load_config(
                None,
                [
                    f"rollout.engine='{engine}'",
                    f"rollout.precision='{precision}'",
                    f"train.steps={args.steps}",
                    "train.eval_every=0",
                ],
            )
            run, _ = run_training(cfg, runs_root=root, name=f"{engine}-{precision}", progress=False)
            d = (
                open_run(run)
                .execute(
                    "SELECT avg(d), quantile_cont(d, 0.99), max(d), avg(CASE WHEN trust_mask "
                    "THEN 0 ELSE 1 END) FROM (SELECT abs(train_logp - rollout_logp) AS d, trust_mask "
                    "FROM tokens WHERE loss_mask)"
                )
                .fetchone()
            )
            print(
                f"{engine:9s}{precision:10s}{d[0]:10.2e}{d[1]:10.2e}{d[2]:10.2e}{d[3]:9.4f}",
                flush=True,
            )


def _big_config():
    from core.model.config import ModelConfig

    return ModelConfig(
        vocab_size=320,
        hidden_size=512,
        num_layers=10,
        num_heads=8,
        num_kv_heads=4,
        ffn_hidden_size=1408,
        max_seq_len=512,
    )


def _speed_case(name, cfg, payload, *, prompts, new_tokens, eos, rounds) -> None:
    from core.rollout.engines import build_engine
    from core.rollout.sampling import SamplingParams

    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    engines = {
        e: build_engine(e, cfg, precision="fp32", instance="bench") for e in ("embedded", "vllm")
    }
    t0 = time.perf_counter()
    engines["vllm"].load_weights(payload, 0)
    start = time.perf_counter() - t0
    engines["embedded"].load_weights(payload, 0)
    tput: dict[str, list[float]] = {e: [] for e in engines}
    load: dict[str, list[float]] = {e: [] for e in engines}
    for r in range(rounds):
        for e, engine in engines.items():
            t0 = time.perf_counter()
            b = engine.generate(
                prompts, params, eos_id=eos, pad_id=0, generator=torch.Generator().manual_seed(r)
            )
            dt = time.perf_counter() - t0
            tput[e].append(int(b.response_mask.sum()) / dt)
            moved = {k: v * (1 + 1e-3 * (r + 1)) for k, v in payload.items()}
            t0 = time.perf_counter()
            engine.load_weights(moved, r + 1)
            load[e].append(time.perf_counter() - t0)
    n = sum(v.numel() for v in payload.values())
    print(
        f"{name}: {n / 1e6:.1f} M parameters, {len(prompts)} prompts x {new_tokens} tokens; "
        f"vLLM start {start:.1f} s"
    )
    for e in engines:
        print(
            f"  {e:9s} rollout {statistics.median(tput[e]):9.0f} tok/s   "
            f"weight load {statistics.median(load[e]) * 1e3:8.1f} ms"
        )
    ratio = statistics.median(tput["vllm"]) / statistics.median(tput["embedded"])
    print(f"  vLLM / embedded throughput: {ratio:.2f}x", flush=True)


def speed(args) -> None:
    from core.model.checkpoint import load_checkpoint
    from core.model.hf_export import DEFAULT_CHECKPOINT
    from core.model.hf_weights import engine_shapes
    from core.sync.convert import actor_to_rollout
    from core.tasks.arithmetic import ArithmeticConfig, make_prompts
    from core.tokenizer.chat_template import encode_prompt
    from core.tokenizer.tokenizer import Tokenizer

    print("\n== rollout throughput and weight load, embedded vs vLLM (fp32, medians) ==")
    tok = Tokenizer.load()
    weights, cfg, _ = load_checkpoint(DEFAULT_CHECKPOINT)
    prompts = [
        encode_prompt(p.question, tok=tok) for p in make_prompts(64, seed=0, cfg=ArithmeticConfig())
    ]
    _speed_case(
        "tiny",
        cfg,
        actor_to_rollout(weights, cfg),
        prompts=prompts,
        new_tokens=6,
        eos=tok.eos_id,
        rounds=args.rounds,
    )
    big = _big_config()
    g = torch.Generator().manual_seed(0)
    payload = {
        k: (torch.ones(s) if len(s) == 1 else torch.randn(s, generator=g) * s[-1] ** -0.5)
        for k, s in engine_shapes(big).items()
    }
    # EOS = the last id, which the random model samples rarely: most requests decode 256 tokens
    _speed_case(
        "~30M",
        big,
        payload,
        prompts=[p[:24] for p in prompts],
        new_tokens=256,
        eos=big.vocab_size - 1,
        rounds=args.rounds,
    )


def grpo(args) -> None:
    from contracts import run_gate
    from core.config import load_config
    from core.driver import run_training

    print("\n== configs/grpo_tiny.toml with rollout.engine='vllm' ==")
    cfg = load_config(REPO / "configs" / "grpo_tiny.toml", ["rollout.engine='vllm'"])
    root = Path(tempfile.mkdtemp(prefix="vllm-grpo-"))
    t0 = time.perf_counter()
    run, summary = run_training(cfg, runs_root=root, name="grpo_tiny_vllm", progress=False)
    gate = run_gate(run)
    print(f"  {run.name}: {time.perf_counter() - t0:.0f} s; {summary}")
    print(f"  gate exit {gate.exit_code}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="gap,speed,grpo")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    args = ap.parse_args()
    for part in args.only.split(","):
        {"gap": gap, "speed": speed, "grpo": grpo}[part](args)


if __name__ == "__main__":
    main()
