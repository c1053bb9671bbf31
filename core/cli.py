"""``closedloop``: the command line. Each subcommand maps onto one component's entry point."""

from __future__ import annotations

import argparse
import sys
import warnings


def _quiet() -> None:
    warnings.filterwarnings("ignore", module="megatron")
    warnings.filterwarnings("ignore", message=".*Apex.*|.*Transformer Engine.*|.*cuda_graph.*")
    import logging

    logging.getLogger("megatron").setLevel(logging.ERROR)


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="GRPO + IcePop training run")
    p.add_argument("--config", default=None, help="TOML config (default configs/grpo_tiny.toml)")
    p.add_argument("--telemetry", default="duckdb", choices=["duckdb", "none"])
    p.add_argument("--run-dir", default="runs", help="runs root: each run gets RUNS/<run_id>/")
    p.add_argument("--steps", type=int, default=None, help="override train.steps")
    p.add_argument("--seed", type=int, default=None, help="override train.seed")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set algorithm.icepop_beta=3",
    )
    p.add_argument("--name", default="grpo", help="run name (part of the run id)")
    p.set_defaults(func=_cmd_train)


def _cmd_train(args) -> int:
    from core.train.driver import train_from_args

    return train_from_args(args)


def _add_pretrain(sub) -> None:
    p = sub.add_parser("pretrain", help="SFT the tiny base model (writes core/assets/base_model)")
    p.add_argument("--out", default=None, help="checkpoint directory")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument(
        "--retrain-tokenizer",
        action="store_true",
        help="also rebuild core/assets/tokenizer.json from the task corpus",
    )
    p.set_defaults(func=_cmd_pretrain)


def _cmd_pretrain(args) -> int:
    from core.train.driver import pretrain_from_args

    return pretrain_from_args(args)


def _add_export_hf(sub) -> None:
    p = sub.add_parser(
        "export-hf", help="write a checkpoint as a Hugging Face directory (transformers loads it)"
    )
    p.add_argument("out", help="output directory")
    p.add_argument(
        "--checkpoint",
        default=None,
        help="closedloop checkpoint (or HF) directory (default: the shipped base model)",
    )
    p.set_defaults(func=_cmd_export_hf)


def _cmd_export_hf(args) -> int:
    from core.model.hf_export import export_hf

    try:
        out = export_hf(args.out, checkpoint=args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        print(f"closedloop export-hf: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="the main job: a short GRPO run with telemetry, then the gate")
    p.add_argument("--run-dir", default="runs")
    p.add_argument("--steps", type=int, default=None)
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args) -> int:
    from core.train.driver import demo

    return demo(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="closedloop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_pretrain(sub)
    _add_demo(sub)
    _add_export_hf(sub)
    for module in _REGISTRARS:
        __import__(module, fromlist=["register"]).register(sub)
    return parser


_REGISTRARS = ["observability.cli", "core.scenario", "contracts.cli", "dashboards.cli"]


def main(argv: list[str] | None = None) -> int:
    _quiet()
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
