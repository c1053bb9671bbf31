"""closedloop for TRL users: record a ``GRPOTrainer`` run as a closedloop run while it trains.

    from closedloop.integrations.trl import record
    record(trainer, run_dir="runs")      # before trainer.train()

The run (``RUNS/<time>-trl-<name>-<id>``) holds, per optimizer step and completion, the exact
prompt and completion ids, TRL's per-token log-probs (the loss forward's, π_old, and vLLM's
sampling log-probs when TRL samples with vLLM), completion and tool masks, the clip branches,
vLLM importance-sampling weights and masks, the off-policy mask, advantages, each reward
function as a reward component, and the step's scalars; the dashboard follows it live and
``closedloop gate`` checks it (what TRL does not compute is declared in ``runs.unrecorded``).

Extension points: no TRL callback sees the batch tensors (``on_step_end`` gets only the model
and optimizer), so ``record`` makes the trainer an instance of a subclass of its own class
(``ClosedloopRecorded<Class>``) whose overrides each call ``super()`` and only read what it
returns or receives: ``_generate_and_score_completions`` (the generation batch; it adds a
``closedloop_sample_id`` row tensor that TRL's shuffle and split carry along),
``_calculate_rewards`` (rewards per function, exact completion ids), ``_compute_loss`` and
``_get_per_token_logps_and_entropies`` (the loss forward's log-probs and entropies), ``log``
(the logged step scalars) and ``train`` (a failure closes the run as failed); a
``TrainerCallback`` ends each step. These are private methods of TRL, hence the version pin
(``SUPPORTED_TRL``). The clip masks are TRL's expressions re-applied to TRL's tensors
(``trl_batch.clip_masks``). Simplifications: one process (``accelerate`` world size 1); with
``num_iterations > 1`` a completion is recorded at its first optimizer step (a step that only
re-trains recorded completions writes no rows); a logged step takes TRL's loss, grad norm, lr and
KL only when its logging window is that one step; the entropy mask (``top_entropy_quantile``)
is not recorded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from closedloop.integrations import trl_batch as B
from closedloop.integrations import trl_columns as C
from observability.config import TelemetryConfig
from observability.emit_step import unrecorded_in
from observability.writer import RUN_INFO_KEYS, DuckDBTelemetry

SUPPORTED_TRL = ((1, 16), (1, 17))
"""TRL versions this integration reads the internals of: >= 1.16, < 1.17 (tested on 1.16.0)."""
SAMPLE_ID_KEY = "closedloop_sample_id"
"""The row tensor added to TRL's generation batch: each completion's closedloop sample id."""
LOGGED = {"loss": "loss", "grad_norm": "grad_norm", "learning_rate": "lr", "kl": "kl_ref"}
"""TRL log keys -> ``steps`` columns, taken from a log whose window is exactly one step."""
LATER = {f"steps.{c}" for c in LOGGED.values()} | {"samples.reward", "samples.advantage"}
"""Columns a first step may leave null that later steps fill (never declared unrecorded)."""


def check_trl_version(version: str | None = None) -> str:
    """The installed TRL version; RuntimeError naming the supported range if it is outside it."""
    if version is None:
        import trl

        version = trl.__version__
    from packaging.version import Version

    release = Version(version).release[:2]
    (lo, hi) = SUPPORTED_TRL
    if not lo <= release < hi:
        raise RuntimeError(
            f"closedloop.integrations.trl supports trl >={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]} "
            f"(tested against 1.16.0); found trl {version}: the GRPOTrainer internals it reads "
            "(_generate_and_score_completions, _compute_loss) may differ"
        )
    return version


def record(
    trainer: Any,
    run_dir: str | Path = "runs",
    *,
    name: str = "grpo",
    telemetry: TelemetryConfig | None = None,
) -> TRLRecorder:
    """Record ``trainer`` (a TRL ``GRPOTrainer``, before ``train()``) as a closedloop run under
    ``run_dir``; returns the recorder (``.run_dir``: the run directory). ``telemetry``: the sink's
    sampling and flushing (``observability.TelemetryConfig``; a longer ``flush_seconds`` writes
    less often: less CPU, more live lag)."""
    version = check_trl_version()
    from trl import GRPOTrainer

    if not isinstance(trainer, GRPOTrainer):
        raise TypeError(f"record() takes a trl.GRPOTrainer, got {type(trainer).__name__}")
    if isinstance(trainer, _Recording):
        raise ValueError(f"this trainer is already recorded to {trainer._closedloop.run_dir}")
    if trainer.accelerator.num_processes != 1:
        raise ValueError(
            f"closedloop records a single-process TRL run; accelerate runs "
            f"{trainer.accelerator.num_processes} processes"
        )
    rec = TRLRecorder(trainer, Path(run_dir), name=name, trl_version=version, telemetry=telemetry)
    trainer.__class__ = _recording_class(type(trainer))
    trainer._closedloop = rec
    trainer.add_callback(_callback(rec))
    return rec


class _Recording:
    """The overrides ``record`` adds to a ``GRPOTrainer`` class; each calls ``super()``."""

    _closedloop: TRLRecorder

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.model.training:
            self._closedloop.rewards = (rewards, completion_ids_list)
        return rewards

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            out[SAMPLE_ID_KEY] = self._closedloop.on_generation(self, out)
        return out

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._closedloop.forwards is not None:
            self._closedloop.forwards.append(out)
        return out

    def _compute_loss(self, model, inputs):
        rec = self._closedloop
        if SAMPLE_ID_KEY not in inputs:  # evaluation
            return super()._compute_loss(model, inputs)
        rec.forwards = []
        try:
            loss = super()._compute_loss(model, inputs)
            logps, entropies, _ = rec.forwards[0]
        finally:
            rec.forwards = None
        rec.on_loss(self, inputs, logps, entropies)
        return loss

    def log(self, logs, start_time=None):
        super().log(logs, start_time)
        if self.model.training:
            self._closedloop.on_log(self.state.global_step, logs)

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        except BaseException:
            self._closedloop.close("failed")
            raise


_CLASSES: dict[type, type] = {}


def _recording_class(cls: type) -> type:
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"ClosedloopRecorded{cls.__name__}", (_Recording, cls), {})
    return _CLASSES[cls]


def _callback(rec: TRLRecorder) -> Any:
    from transformers import TrainerCallback

    class ClosedloopCallback(TrainerCallback):
        """Times each optimizer step and hands it to the recorder when it ends."""

        def on_train_begin(self, args, state, control, **kw):
            rec.last_logged = state.global_step

        def on_step_begin(self, args, state, control, **kw):
            rec.step_begin()

        def on_step_end(self, args, state, control, **kw):
            rec.step_end(state.global_step, will_log=control.should_log)

        def on_train_end(self, args, state, control, **kw):
            rec.close("finished")

    return ClosedloopCallback()


def staleness_limit(args: Any) -> int:
    """The most optimizer steps a TRL completion can wait between its generation and its loss:
    one generation serves ``steps_per_generation × num_iterations`` micro-batches, of which
    ``gradient_accumulation_steps`` make an optimizer step."""
    micro = args.steps_per_generation * args.num_iterations
    return max(0, -(-micro // args.gradient_accumulation_steps) - 1)


def _tokenizer_json(processing_class: Any) -> str | None:
    """The trainer's fast tokenizer as ``tokenizer.json`` text, or None."""
    tok = getattr(processing_class, "tokenizer", processing_class)
    backend = getattr(tok, "backend_tokenizer", None)
    return None if backend is None else backend.to_str()


def _metered(method):
    """Adds the training-thread CPU time of a recorder method to ``recorder.cpu_s``."""

    @functools.wraps(method)
    def metered(self, *args, **kwargs):
        t = time.thread_time()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.cpu_s += time.thread_time() - t

    return metered


class TRLRecorder:
    """The state of one recorded TRL run: generated samples waiting for their loss, the current
    step's trained samples, and the telemetry sink (opened at the first step end, when the run
    knows what it records)."""

    def __init__(
        self,
        trainer: Any,
        runs_root: Path,
        *,
        name: str,
        trl_version: str,
        telemetry: TelemetryConfig | None = None,
    ) -> None:
        self.trainer = trainer
        self.telemetry = telemetry
        self.run_dir = (
            runs_root / f"{time.strftime('%Y%m%d-%H%M%S')}-trl-{name}-{uuid.uuid4().hex[:6]}"
        )
        self.run_dir.mkdir(parents=True, exist_ok=False)
        self.settings = B.LossSettings.of(trainer)
        self.names = list(trainer.reward_func_names)
        self.weights = trainer.reward_weights.detach().cpu().double().numpy()
        self.eos_ids = [int(i) for i in trainer.eos_token_ids]
        tok = _tokenizer_json(trainer.processing_class)
        rev = None
        if tok is not None:
            (self.run_dir / "tokenizer.json").write_text(tok, encoding="utf-8")
            rev = hashlib.sha256((self.run_dir / "tokenizer.json").read_bytes()).hexdigest()
        self.info = {
            "config": {
                "trl": {"version": trl_version, "args": json.loads(trainer.args.to_json_string())}
            },
            "algorithm": f"trl-grpo/{self.settings.loss_type}",
            "vocab_size": int(trainer.model.config.get_text_config().vocab_size),
            "tokenizer_rev": rev,
            "device": str(trainer.accelerator.device),
            "staleness_limit": staleness_limit(trainer.args),
        }
        self.rewards: tuple[Any, Any] | None = None
        self.forwards: list | None = None
        self.gens: dict[int, B.GenBatch] = {}
        """Generation batches by first sample id, until all their samples are recorded."""
        self.waiting: dict[int, int] = {}
        """Samples of each generation batch not yet recorded."""
        self.losses: list[B.LossBatch] = []
        """The current optimizer step's loss batches (their first time in a loss)."""
        self.recorded: set[int] = set()
        self.next_id = 0
        self.sink: DuckDBTelemetry | None = None
        self.unrecorded: set[str] = set()
        self.pending: tuple[int, dict] | None = None
        self.last_logged: int | None = None
        self.t_step = time.perf_counter()
        self.closed = False
        self.cpu_s = 0.0
        """Training-thread CPU seconds spent in the recorder (captures, rows, emit)."""
        self.writer_cpu_s: float | None = None
        """The sink's writer thread CPU seconds, taken when the run closes."""

    # -- captures (called from the trainer's overrides) --
    @_metered
    def on_generation(self, trainer: Any, out: dict) -> Any:
        import torch

        if self.rewards is None:
            raise RuntimeError("TRL scored no rewards for this generation batch")
        rewards, completion_ids = self.rewards
        self.rewards = None
        first = self.next_id
        gen = B.gen_batch(
            out, completion_ids, rewards, first_id=first, policy_version=trainer.state.global_step
        )
        self.gens[first], self.waiting[first] = gen, len(completion_ids)
        self.next_id += len(completion_ids)
        return torch.arange(first, self.next_id)

    @_metered
    def on_loss(self, trainer: Any, inputs: dict, logps: Any, entropies: Any) -> None:
        s = self.settings
        ids = inputs[SAMPLE_ID_KEY].cpu().numpy()
        new = np.array([i not in self.recorded for i in ids.tolist()], dtype=bool)
        if not new.any():  # a later iteration (num_iterations > 1): recorded already
            return
        keep = None
        if s.off_policy_mask_threshold is not None:
            mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
            old = inputs.get("old_per_token_logps")
            adv = inputs["advantages"]
            keep = trainer.get_off_policy_mask(
                advantages=adv.unsqueeze(1) if adv.dim() == 1 else adv,
                per_token_logps=logps,
                sampling_per_token_logps=inputs.get(
                    "sampling_per_token_logps", logps.detach() if old is None else old
                ),
                mask=mask,
                off_policy_threshold=s.off_policy_mask_threshold,
            )
        lb = B.loss_batch(
            inputs, ids, logps, entropies,
            settings=s, step=trainer.state.global_step, off_policy_mask=keep,
        )  # fmt: skip
        if not new.all():
            lb = B.LossBatch(
                step=lb.step,
                ids=lb.ids[new],
                **{
                    k: None if getattr(lb, k) is None else getattr(lb, k)[new]
                    for k in C.LOSS_FIELDS
                },
            )
        self.recorded.update(lb.ids.tolist())
        self.losses.append(lb)

    # -- step boundaries (callback) and logs --
    def step_begin(self) -> None:
        self.flush_pending()
        self.t_step = time.perf_counter()

    @_metered
    def step_end(self, global_step: int, *, will_log: bool) -> None:
        took = time.perf_counter() - self.t_step
        step = global_step - 1
        if not self.losses:
            return
        ids, rows = C.gather(self.losses, list(self.gens.values()))
        self.losses = []
        columns = C.step_tables(
            ids, rows, settings=self.settings, weights=self.weights,
            group_size=self.trainer.num_generations, eos_ids=self.eos_ids,
        )  # fmt: skip
        columns["reward_components"]["component"] = self.names * len(ids)
        columns["steps"].update(step=step, policy_version=global_step, step_time_s=took)
        for first in list(self.waiting):
            self.waiting[first] -= int(
                ((ids >= first) & (ids < first + len(self.gens[first].n))).sum()
            )
            if self.waiting[first] == 0:
                del self.waiting[first], self.gens[first]
        self.pending = (step, columns)
        if not will_log:
            self.flush_pending()

    def on_log(self, global_step: int, logs: dict) -> None:
        if self.pending is None or self.pending[0] != global_step - 1:
            return
        if self.last_logged is not None and global_step - self.last_logged == 1:
            row = self.pending[1]["steps"]
            row.update(
                {col: float(logs[k]) for k, col in LOGGED.items() if logs.get(k) is not None}
            )
        self.last_logged = global_step
        self.flush_pending()

    @_metered
    def flush_pending(self) -> None:
        """Emit the pending step (opening the sink at the first one)."""
        if self.pending is None or self.closed:
            return
        step, columns = self.pending
        self.pending = None
        if self.sink is None:
            self._open(columns)
        for name in self.unrecorded:  # a column declared from the first step stays null
            table, _, col = name.partition(".")
            if col and col in columns.get(table, {}):
                columns[table][col] = None
        for table, cols in columns.items():
            if table not in ("tokens", "reward_components") or len(cols["sample_id"]):
                self.sink.emit(table, cols)
        self.sink.step_end(step)

    def _open(self, columns: dict) -> None:
        declared = [
            f"runs.{k}"
            for k in RUN_INFO_KEYS
            if k not in ("config", "unrecorded") and self.info.get(k) is None
        ]
        declared += [
            n for n in unrecorded_in(columns, writes=["reward_components"]) if n not in LATER
        ]
        self.unrecorded = {n for n in declared if "." in n}
        info = {**self.info, "unrecorded": declared}
        self.sink = DuckDBTelemetry(self.run_dir, run_info=info, config=self.telemetry)

    def close(self, status: str) -> None:
        if self.closed:
            return
        if status == "finished":
            self.flush_pending()
        self.closed = True
        if self.sink is not None:
            if status == "finished":
                self.sink.flush()
            self.writer_cpu_s = self.sink.writer_cpu_seconds()
            self.sink.close(status)
