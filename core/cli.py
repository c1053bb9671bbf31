"""The training core's commands: ``train``, ``pretrain``, ``export-hf``, ``scenario``, ``rewards``.

``register(subparsers)`` adds them to the ``closedloop`` console script (``closedloop.cli``,
which composes every package's commands); ``python -m core.cli`` runs the core's commands alone.
"""

from __future__ import annotations

import argparse
import sys


def quiet() -> None:
    """Silence megatron's import-time warnings about CUDA-only extensions."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", module="megatron")
    warnings.filterwarnings("ignore", message=".*Apex.*|.*Transformer Engine.*|.*cuda_graph.*")
    logging.getLogger("megatron").setLevel(logging.ERROR)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train`` options (also the ``demo`` command's training part)."""
    from core.run import telemetry_choices

    p.add_argument("--config", default=None, help="TOML config (default configs/grpo_tiny.toml)")
    p.add_argument(
        "--telemetry",
        default="duckdb",
        choices=telemetry_choices(),
        help="duckdb: the store; duckdb,tensorboard / duckdb,wandb (or both): also the step "
        "rollups as TensorBoard scalars / an offline W&B run",
    )
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
    p.add_argument(
        "--name",
        default=None,
        help="run name (part of the run id); default: the --config file's stem, else 'grpo'",
    )


def _cmd_train(args) -> int:
    from core.driver import train_from_args

    return train_from_args(args)


def _cmd_pretrain(args) -> int:
    from core.driver import pretrain_from_args

    return pretrain_from_args(args)


def _cmd_export_hf(args) -> int:
    from core.model.hf_export import export_hf

    try:
        out = export_hf(args.out, checkpoint=args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        print(f"closedloop export-hf: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


def register(sub) -> None:
    """Add ``train``, ``pretrain``, ``export-hf``, ``scenario`` and ``rewards`` to an argparse
    subparsers."""
    from core import scenario
    from core.rewards import cli as rewards

    p = sub.add_parser("train", help="GRPO + IcePop training run")
    add_train_arguments(p)
    p.set_defaults(func=_cmd_train)
    p = sub.add_parser("pretrain", help="SFT the tiny base model (writes core/assets/base_model)")
    p.add_argument("--out", default=None, help="checkpoint directory")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=None, help="initialisation and data seed")
    p.add_argument(
        "--teacher-error-rate",
        type=float,
        default=None,
        help="fraction of flawed demonstrations (default 0.7; 0: a clean, stronger model)",
    )
    p.add_argument(
        "--env",
        default="arithmetic",
        choices=["arithmetic", "tool", "longhorizon"],
        help="which base: arithmetic (core/assets/base_model), tool (core/assets/tool_model, "
        "SFT'd from the arithmetic base on multi-turn calculator demonstrations) or longhorizon "
        "(core/assets/longhorizon_model, SFT on a flawed teacher's compacted demonstrations)",
    )
    p.add_argument(
        "--retrain-tokenizer",
        action="store_true",
        help="also rebuild core/assets/tokenizer.json from the task corpus",
    )
    p.set_defaults(func=_cmd_pretrain)
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
    scenario.register(sub)
    rewards.register(sub)


def main(argv: list[str] | None = None) -> int:
    quiet()
    parser = argparse.ArgumentParser(prog="core.cli", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
