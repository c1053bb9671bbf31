"""Entry points behind ``closedloop train | pretrain | demo``: config → run dir → session → loop."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from core.config import ConfigError, RunConfig, load_config
from core.envs.registry import chat_template_rev
from core.run import (
    check_telemetry,
    file_logger,
    is_store,
    new_run_dir,
    open_telemetry,
    write_resolved_config,
    write_tokenizer,
)
from core.tokenizer.tokenizer import Tokenizer

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def resolve_config(config_path, overrides, *, steps=None, seed=None) -> RunConfig:
    extra = list(overrides or [])
    if steps is not None:
        extra.append(f"train.steps={steps}")
    if seed is not None:
        extra.append(f"train.seed={seed}")
    return load_config(config_path, extra)


def run_training(
    cfg: RunConfig,
    *,
    runs_root: str | Path,
    telemetry: str = "duckdb",
    name: str = "grpo",
    progress: bool = True,
) -> tuple[Path, dict]:
    """Create ``RUNS/<run_id>/``, train, close telemetry; returns (run_dir, summary)."""
    from core.loops.session import Session

    if telemetry != "none":
        check_telemetry(telemetry)  # a typo or a missing mirror package: before the run dir
    tok = Tokenizer.load()
    run_dir = new_run_dir(runs_root, name)
    write_resolved_config(run_dir, cfg)
    write_tokenizer(run_dir, tok.path)
    log = file_logger(run_dir)
    sink = open_sink(telemetry, run_dir, cfg, tok=tok)
    bar = None
    try:
        session = Session(cfg, sink, tok=tok)
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=cfg.train.steps, desc=run_dir.name, file=sys.stderr, leave=True)

        def on_step(m: dict) -> None:
            log.info(
                "step %d reward %.3f |dlogp| %.2e masked %.3f step %.2fs",
                m["step"],
                m["reward_mean"],
                m["mismatch_abs_mean"],
                m["masked_fraction"],
                m["step_time_s"],
            )
            if bar is not None:
                bar.set_postfix(
                    reward=f"{m['reward_mean']:.3f}",
                    dlogp=f"{m['mismatch_abs_mean']:.1e}",
                    masked=f"{m['masked_fraction']:.3f}",
                    step_s=f"{m['step_time_s']:.2f}",
                )
                bar.update(1)

        t0 = time.time()
        summary = training_loop(cfg)(session, steps=cfg.train.steps, progress=on_step)
        summary["seconds"] = time.time() - t0
        if cfg.train.save_checkpoint:
            summary["checkpoint"] = str(save_final_checkpoint(session, run_dir))
        summary["run_dir"] = str(run_dir)
        log.info(
            "finished: eval accuracy %.3f -> %.3f",
            summary["eval_accuracy_start"],
            summary["eval_accuracy_end"],
        )
    except BaseException:
        try:
            sink.close("failed")
        except Exception as e:  # keep the training error; report the telemetry one
            log.warning("telemetry close after a failed run raised: %s", e)
        raise
    finally:
        if bar is not None:
            bar.close()
    sink.close("finished")
    return run_dir, summary


def training_loop(cfg: RunConfig):
    """The run function ``algorithm.name`` selects: ``(session, *, steps, progress) -> summary``."""
    name = cfg.algorithm.name
    if name == "sao":
        from core.loops.sao import run_sao

        return run_sao
    if name == "compaction":
        from core.loops.compaction_rl import run_compaction

        return run_compaction
    if cfg.rollout.mode == "async":
        from core.loops.async_grpo import run_async

        return run_async
    from core.loops.grpo import run_grpo

    return run_grpo


def open_sink(telemetry: str, run_dir: Path, cfg: RunConfig, *, tok: Tokenizer):
    """The run's telemetry sink (``core.run.open_telemetry``). Any store, mirrored or not
    (``duckdb``, ``duckdb,tensorboard``, ...), is closed as ``failed`` on SIGTERM/SIGINT before
    the signal's usual effect (``observability.signals``)."""
    sink = open_telemetry(
        telemetry,
        run_dir,
        cfg,
        tokenizer_rev=tok.revision,
        chat_template_rev=chat_template_rev(cfg.env.name),
        vocab_size=tok.vocab_size,
    )
    if is_store(telemetry):
        from observability.signals import install_signal_handlers

        install_signal_handlers(sink)
    return sink


def save_final_checkpoint(session, run_dir: Path) -> Path:
    """The actor's final weights as ``RUN_DIR/checkpoint`` or ``train.checkpoint_dir`` (loadable
    as ``train.base_model`` or as a teacher)."""
    from core.model.checkpoint import save_checkpoint
    from core.teachers.provenance import checkpoint_provenance

    out = run_dir / "checkpoint"
    if session.cfg.train.checkpoint_dir:
        out = Path(session.cfg.train.checkpoint_dir)
        out = out if out.is_absolute() else REPO_ROOT / out
    meta = {
        "produced_by": "closedloop train",
        "run_id": run_dir.name,
        "policy_version": session.version,
        "tokenizer_rev": session.tok.revision,
        "chat_template_rev": chat_template_rev(session.cfg.env.name),
        "vocab_hash": session.tok.vocab_hash,
        "base_model": session.cfg.train.base_model,
        "task": session.cfg.to_dict()["task"],
    }
    meta |= checkpoint_provenance(session.cfg, session.base_meta, repo_root=REPO_ROOT)
    save_checkpoint(out, session.actor.named_weights(), session.model_cfg, meta)
    return out


def print_summary(run_dir: Path, summary: dict) -> None:
    steps = summary["steps"]
    print(f"run: {run_dir}")
    print(
        f"  held-out greedy accuracy: {summary['eval_accuracy_start']:.3f} -> "
        f"{summary['eval_accuracy_end']:.3f} after {len(steps)} steps ({summary['seconds']:.0f}s)"
    )
    if steps:
        last = steps[-1]
        print(
            f"  last step: reward {last['reward_mean']:.3f}, mean |train-rollout logp| "
            f"{last['mismatch_abs_mean']:.2e}, masked {last['masked_fraction']:.3f}"
        )


def _run_name(args) -> str:
    """``--name``, else the config file's stem (``configs/opd_tiny.toml`` -> ``opd_tiny``)."""
    if args.name:
        return args.name
    return Path(args.config).stem if args.config else "grpo"


def train_from_args(args) -> int:
    try:
        cfg = resolve_config(args.config, args.set, steps=args.steps, seed=args.seed)
    except (ConfigError, ValueError) as e:
        print(f"closedloop train: config error: {e}", file=sys.stderr)
        return 2
    try:
        if args.telemetry != "none":
            check_telemetry(args.telemetry)
        if "vllm" in (cfg.rollout.engine, cfg.teachers.engine):
            from core.rollout.vllm_runtime import import_vllm

            import_vllm()  # before the run dir: the error names the install command
    except (ValueError, RuntimeError) as e:
        print(f"closedloop train: {e}", file=sys.stderr)
        return 2
    from core.teachers.compat import TeacherIncompatible

    try:
        run_dir, summary = run_training(
            cfg, runs_root=args.run_dir, telemetry=args.telemetry, name=_run_name(args)
        )
    except (TeacherIncompatible, FileNotFoundError) as e:  # a teacher or reward model
        print(f"closedloop train: {e}", file=sys.stderr)
        return 2
    print_summary(run_dir, summary)
    return 0


def pretrain_from_args(args) -> int:
    from core.pretrain.arithmetic import pretrain

    if getattr(args, "env", "arithmetic") == "longhorizon":
        from core.pretrain.longhorizon import LONGHORIZON_MODEL, pretrain_longhorizon

        pretrain_longhorizon(
            args.out or LONGHORIZON_MODEL,
            tok=Tokenizer.load(),
            **({"steps": args.steps} if args.steps else {}),
        )
        return 0
    cfg = load_config(None)
    if getattr(args, "env", "arithmetic") == "tool":
        from core.pretrain.tool import TOOL_MODEL, pretrain_tool

        pretrain_tool(
            args.out or TOOL_MODEL,
            tok=Tokenizer.load(),
            **({"steps": args.steps} if args.steps else {}),
        )
        return 0
    if args.retrain_tokenizer:
        from core.pretrain.tokenizer import build_tokenizer_asset

        build_tokenizer_asset()
    out = args.out or str(Path(__file__).resolve().parent.parent / "assets" / "base_model")
    extra = {}
    if args.seed is not None:
        extra["seed"] = args.seed
    if args.teacher_error_rate is not None:
        extra["teacher_error_rate"] = args.teacher_error_rate
    pretrain(
        out,
        model_cfg=cfg.model,
        task_cfg=cfg.task,
        tok=Tokenizer.load(),
        steps=args.steps or PRETRAIN_STEPS,
        **extra,
    )
    return 0


PRETRAIN_STEPS = 1500
