"""``closedloop rewards train-orm | train-judge``: reward models from runs' verified rollouts."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def _rollouts(args):
    from core.rewards.data import verified_rollouts
    from core.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer.load()
    rollouts = verified_rollouts(args.runs, tok=tok)
    if len(rollouts) < 10:
        print(
            f"closedloop rewards: {len(rollouts)} verified rollouts in {args.runs}; need >= 10 "
            "(runs with DuckDB telemetry and token rows)",
            file=sys.stderr,
        )
        return tok, None
    return tok, rollouts


def _cmd_orm(args) -> int:
    from core.rewards.train import build_orm

    tok, rollouts = _rollouts(args)
    if rollouts is None:
        return 2
    build_orm(rollouts, args.out, tok=tok, steps=args.steps, seed=args.seed, sources=args.runs)
    return 0


def _cmd_judge(args) -> int:
    from core.rewards.train import build_judge

    tok, rollouts = _rollouts(args)
    if rollouts is None:
        return 2
    base = Path(args.base)
    build_judge(
        rollouts,
        args.out,
        tok=tok,
        base=base if base.is_absolute() else REPO_ROOT / base,
        prefer_long=args.prefer_long,
        steps=args.steps,
        seed=args.seed,
        sources=args.runs,
    )
    return 0


def register(subparsers) -> None:
    """Add ``closedloop rewards train-orm|train-judge --runs RUN... --out DIR``."""
    p = subparsers.add_parser("rewards", help="train reward models on verified rollouts")
    sub = p.add_subparsers(dest="rewards_command", required=True)
    for name, fn, steps, doc in (
        ("train-orm", _cmd_orm, 600, "outcome reward model (a classifier of correctness)"),
        ("train-judge", _cmd_judge, 300, "generative judge (an LM that writes yes / no)"),
    ):
        q = sub.add_parser(name, help=doc)
        q.add_argument("--runs", nargs="+", required=True, help="run directories to read")
        q.add_argument("--out", required=True, help="output directory")
        q.add_argument("--steps", type=int, default=steps)
        q.add_argument("--seed", type=int, default=0)
        if name == "train-judge":
            q.add_argument("--base", default="core/assets/base_model", help="checkpoint to tune")
            q.add_argument(
                "--prefer-long",
                action="store_true",
                help="label like a rater who also accepts any long answer (judge-hacking)",
            )
        q.set_defaults(func=fn)
