"""The telemetry schema: the one source of tables, columns, Arrow types, enums and value ranges.

The writer validates and types records with it, the reader builds typed views from it,
``contracts/`` turns ``ColumnSpec`` bounds into pandera fields, dashboards and notebooks query the
column names defined here (public interface: add columns, never rename). Simplifications: bounds
are inclusive ``min``/``max`` (plus ``below_vocab``: value < the run's ``vocab_size``); for list
columns they apply to the elements; enums are stored as plain strings; time points are UTC
``timestamp[us]``, durations are float seconds.
"""

from __future__ import annotations

from types import MappingProxyType

import pyarrow as pa

from observability import enums as E
from observability.spec import SCHEMA_VERSION, ColumnSpec, TableSpec

__all__ = ["ENUMS", "SCHEMA_VERSION", "TABLES", "ColumnSpec", "TableSpec", "table_spec"]

I16, I32, I64 = pa.int16(), pa.int32(), pa.int64()
F32, F64, STR, BOOL = pa.float32(), pa.float64(), pa.string(), pa.bool_()
TS = pa.timestamp("us", tz="UTC")


def _c(name: str, type_: pa.DataType, doc: str, **rules) -> ColumnSpec:
    return ColumnSpec(name, type_, doc, **rules)


def _enum(name: str, values: tuple[str, ...], doc: str, nullable: bool = False) -> ColumnSpec:
    return ColumnSpec(name, STR, doc, nullable=nullable, enum=values, dictionary=True)


def _frac(name: str, doc: str) -> ColumnSpec:
    return ColumnSpec(name, F64, doc + " (fraction in [0, 1])", min=0.0, max=1.0)


def _nonneg(name: str, type_: pa.DataType, doc: str, **rules) -> ColumnSpec:
    return ColumnSpec(name, type_, doc, min=0, **rules)


def _logp(name: str, doc: str) -> ColumnSpec:
    return ColumnSpec(name, F32, doc + " (finite, <= 0)", max=0.0, finite=True)


RUN_ID = _c(
    "run_id", STR, "run identifier (filled in by the sink)", nullable=False, dictionary=True
)
STEP = _nonneg("step", I64, "optimizer step", nullable=False, dictionary=True)
STEP_OPT = _nonneg("step", I64, "optimizer step, when the record belongs to one", dictionary=True)
RANK = _nonneg(
    "rank", I32, "data-parallel rank (filled in by the sink)", nullable=False, dictionary=True
)
SAMPLE_ID = _nonneg("sample_id", I64, "trajectory id, unique in the run", nullable=False)
POS = _nonneg("pos", I32, "token position in the full sequence (prompt included)", nullable=False)
POLICY_VERSION = _nonneg("policy_version", I64, "weights version", nullable=False, dictionary=True)
ENGINE = _enum("engine", E.ENGINES, "which side computed the record")
CATEGORY = _enum("category", E.MEMORY_CATEGORIES, "memory ledger category")
OWNER = _c("owner", STR, "component that owns the memory", dictionary=True)

_TABLES = (
    TableSpec(
        "runs",
        "one row per status change of a run; the reader's view keeps the latest",
        (
            RUN_ID,
            _c("schema_version", I32, "SCHEMA_VERSION of the writer", nullable=False),
            _c("started_at", TS, "run start (UTC)", nullable=False),
            _c("updated_at", TS, "when this status row was written (UTC)", nullable=False),
            _c("config", STR, "full run config", json=True),
            _c("git_sha", STR, "source revision"),
            _c("device", STR, "accelerator, e.g. 'cpu', 'cuda:H200'"),
            _c("world_size", I32, "number of ranks", nullable=False, min=1),
            _c("algorithm", STR, "loss / estimator name"),
            _c("tokenizer_rev", STR, "tokenizer revision"),
            _c("chat_template_rev", STR, "chat template revision"),
            _enum("status", E.RUN_STATUSES, "run status"),
            _c("ended_at", TS, "run end (UTC), null while running"),
            _c("vocab_size", I64, "tokenizer vocabulary size (token ids must be below it)", min=1),
            _c("run_dir", STR, "run directory as the writer saw it"),
            _c("icepop_beta", F64, "declared IcePop ratio bound", min=0.0),
            _c("dis_eps_low", F64, "declared lower ratio-mask epsilon", min=0.0),
            _c("dis_eps_high", F64, "declared upper ratio-mask epsilon", min=0.0),
            _nonneg("staleness_limit", I64, "declared maximum policy staleness"),
            _c("unrecorded", pa.list_(STR), "tables / table.columns the producer never fills"),
        ),
        key=("run_id", "updated_at"),
    ),
    TableSpec(
        "steps",
        "one row per optimizer step and rank",
        (
            RUN_ID,
            STEP,
            RANK,
            POLICY_VERSION,
            _c("wall_time", TS, "end of the step (UTC)"),
            _c("loss", F64, "total loss"),
            _c("policy_loss", F64, "policy-gradient part of the loss"),
            _c("entropy", F64, "mean token entropy over loss tokens"),
            _nonneg("grad_norm", F64, "global gradient norm before clipping"),
            _nonneg("lr", F64, "learning rate"),
            _c("reward_mean", F64, "mean reward of the step's samples"),
            _nonneg("reward_std", F64, "reward standard deviation"),
            _nonneg("n_tokens", I64, "tokens in the batch"),
            _nonneg("n_loss_tokens", I64, "tokens with loss_mask"),
            _nonneg("n_trusted_tokens", I64, "loss tokens kept by the trust mask"),
            _frac("masked_fraction", "loss tokens removed by any mask"),
            _frac("icepop_masked_fraction", "loss tokens removed by IcePop"),
            _frac("clip_fraction", "loss tokens whose ratio was clipped"),
            _nonneg(
                "mismatch_abs_mean", F64, "mean |train_logp - rollout_logp| over action tokens"
            ),
            _nonneg("mismatch_abs_p99", F64, "p99 of |train_logp - rollout_logp|"),
            _nonneg("staleness_max", I64, "largest policy staleness in the batch"),
            _frac("degenerate_group_fraction", "groups with zero reward variance"),
            _nonneg("step_time_s", F64, "step duration"),
            _nonneg("rollout_time_s", F64, "rollout duration"),
            _nonneg("train_time_s", F64, "train duration"),
            _nonneg("peak_memory_bytes", I64, "peak accelerator memory"),
            _frac("topk_agreement", "Top-k index agreement train vs rollout"),
            _frac("route_agreement", "MoE routing agreement train vs rollout"),
            _nonneg("teacher_mismatch_abs_mean", F64, "mean |train_logp - teacher_logp|"),
            _frac("dis_low_fraction", "loss tokens masked below the ratio band"),
            _frac("dis_high_fraction", "loss tokens masked above the ratio band"),
            _frac("stale_fraction", "samples dropped as stale"),
            _frac("eval_accuracy", "latest eval accuracy"),
            _frac(
                "retokenized_fraction",
                "action tokens whose train id differs from rollout; null when TITO holds",
            ),
            _c("kl_ref", F64, "KL to the reference policy"),
            _enum("teacher_payload", E.TEACHER_PAYLOADS, "what the teachers sent", nullable=True),
            _nonneg("teacher_payload_bytes", I64, "teacher payload bytes moved in the step"),
            _c(
                "teacher_kl",
                F64,
                "sampled reverse-KL estimate mean(train_logp - teacher_logp) over scored tokens",
            ),
            _c("distill_loss", F64, "Top-k reverse-KL term of the loss (weighted)"),
            _frac(
                "judge_verifier_agreement",
                "samples whose parsed judge verdict agrees with the verifier",
            ),
            _c(
                "optimizer_stepped", BOOL, "the optimizer stepped (false: skipped, see skip_reason)"
            ),
            _c("skip_reason", STR, "why no optimizer step was taken (e.g. 'stale')"),
            _nonneg("queue_depth", I64, "finished samples waiting in the rollout queue (async)"),
            _nonneg("in_flight", I64, "rollout sessions running when the step took its batch"),
            _frac("worker_busy_fraction", "mean share of wall time the rollout workers decoded"),
            _nonneg("rollout_wait_s", F64, "time the trainer waited for finished groups"),
            _nonneg("n_env_failures", I64, "samples of the step that failed in the environment"),
            _nonneg("n_refilled", I64, "refill samples in the step's groups"),
            _nonneg("n_groups_dropped", I64, "groups dropped by the environment-failure rule"),
            _nonneg("n_weight_switches", I64, "worker weight switches reported during the step"),
            _c("optimizer_reset", BOOL, "the optimizer state was reset after a weight sync"),
            _nonneg("value_loss", F64, "critic value loss before the step's value updates"),
            _c(
                "value_explained_variance",
                F64,
                "1 - Var(return - value) / Var(return) over loss tokens (critic calibration)",
            ),
            _nonneg("critic_grad_norm", F64, "critic gradient norm of the last value update"),
            _nonneg("critic_updates", I64, "value optimizer steps taken before the policy step"),
            _c("critic_frozen_checksum", STR, "hash of the critic's frozen (attention) parameters"),
            _nonneg(
                "loss_denominator",
                I64,
                "policy-loss denominator: trainable tokens of every sample and segment in the loss "
                "(null unless the loss is normalised over tokens, global-token)",
            ),
            _nonneg(
                "n_trajectories",
                I64,
                "trajectories in the step's loss (segments of one count once)",
            ),
        ),
        key=("run_id", "step", "rank"),
    ),
    TableSpec(
        "train_logprobs",
        "the trainer's log-prob and logsumexp of each scored target token, per step and rank",
        (
            RUN_ID,
            STEP,
            RANK,
            POLICY_VERSION,
            _c("tp_size", I32, "tensor-parallel size of the trainer", nullable=False, min=1),
            SAMPLE_ID,
            POS,
            _nonneg("token_id", I32, "the scored (target) token", nullable=False, below_vocab=True),
            _logp("logp", "log-prob of token_id given the prefix (vocabulary-parallel under TP)"),
            _c("logsumexp", F32, "logsumexp of the tempered logits", finite=True),
        ),
        key=("run_id", "step", "rank", "sample_id", "pos"),
        per_token=True,
    ),
    TableSpec(
        "samples",
        "one row per trajectory",
        (
            RUN_ID,
            SAMPLE_ID,
            STEP,
            _c("prompt_id", STR, "dataset prompt id"),
            _nonneg("group_id", I64, "GRPO group"),
            _c("domain", STR, "task domain", dictionary=True),
            _c("engine", STR, "rollout engine name", dictionary=True),
            _nonneg(
                "policy_version_rollout", I64, "weights version that generated it", dictionary=True
            ),
            _nonneg(
                "policy_version_train", I64, "weights version it was trained on", dictionary=True
            ),
            _nonneg("staleness", I64, "policy_version_train - policy_version_rollout"),
            _c("reward", F64, "total reward"),
            _c("advantage", F64, "sequence advantage"),
            _nonneg("n_prompt_tokens", I32, "prompt length"),
            _nonneg("n_response_tokens", I32, "response length (all non-prompt tokens)"),
            _enum("status", E.SAMPLE_STATUSES, "what happened to the sample"),
            _c("failure_reason", STR, "why the environment or sample failed"),
            _c("tokenizer_rev", STR, "tokenizer revision used by the rollout", dictionary=True),
            _c("chat_template_rev", STR, "chat template revision", dictionary=True),
            _c("sampling", STR, "sampling parameters", json=True, dictionary=True),
            _c("teacher_id", STR, "teacher model, if distilled", dictionary=True),
            _c("response_text", STR, "decoded response"),
            _c(
                "finish_reason", STR, "engine finish reason, e.g. 'stop', 'length'", dictionary=True
            ),
            _c(
                "tokens_sampled",
                BOOL,
                "per-token rows kept by token_sample_rate (filled by the sink)",
            ),
            _c("env", STR, "environment kind that produced the sample", dictionary=True),
            _nonneg("n_turns", I32, "policy turns of the episode"),
            _nonneg("segment", I32, "segment index within its trajectory (0 unless compacted)"),
            _nonneg("parent_sample_id", I64, "sample id of the trajectory's first segment"),
            _nonneg(
                "worker", I32, "rollout worker (DP rank) that generated the sample", dictionary=True
            ),
            _nonneg("env_latency_s", F64, "environment time summed over the sample's turns"),
            _c("refill", BOOL, "the sample refilled a group after an environment failure"),
            _nonneg(
                "policy_version_rollout_max",
                I64,
                "newest weights version among the sample's generated tokens",
                dictionary=True,
            ),
        ),
        key=("run_id", "sample_id"),
    ),
    TableSpec(
        "tokens",
        "one row per token of a trajectory",
        (
            RUN_ID,
            STEP,
            SAMPLE_ID,
            POS,
            _nonneg("token_id", I32, "token id from the rollout", nullable=False, below_vocab=True),
            _enum("role", E.ROLES, "token role"),
            _c("loss_mask", BOOL, "token is in the loss", nullable=False),
            _logp("rollout_logp", "log-prob under the rollout engine"),
            _logp("train_logp", "log-prob recomputed by the trainer"),
            _logp(
                "old_logp",
                "π_old of the ratio: the trainer's recompute, or rollout_logp (old_logp=rollout)",
            ),
            _logp("teacher_logp", "log-prob under the teacher"),
            _nonneg("ratio", F32, "importance ratio exp(train_logp - rollout_logp)"),
            _c("trust_mask", BOOL, "token kept by the trust / mismatch masks"),
            _enum("mask_reason", E.MASK_REASONS, "why the token was masked", nullable=True),
            _c("advantage", F32, "token advantage"),
            _nonneg("entropy", F32, "token entropy under the trainer"),
            _c("prefix_hash", I64, "hash of the token prefix up to pos (TITO checks)"),
            _nonneg(
                "policy_version_rollout", I64, "weights version that generated it", dictionary=True
            ),
            _nonneg(
                "train_token_id",
                I32,
                "token id the trainer used; differs when TITO is violated",
                below_vocab=True,
            ),
            _c("teacher_id", STR, "teacher model, if distilled", dictionary=True),
            _nonneg(
                "turn", I32, "policy turn the token belongs to (observations: the turn before)"
            ),
            _nonneg(
                "kv_version",
                I64,
                "oldest weights version among the keys/values the token was decoded against",
                dictionary=True,
            ),
            _c("value", F32, "critic value of the state that generates the token", finite=True),
            _c("return", F32, "GAE return (value target) of the token", finite=True),
            _nonneg("segment", I32, "segment of the token's sample (0 unless compacted)"),
            _c(
                "teacher_prefix_hash",
                I64,
                "the teacher's hash of the token prefix it scored (equals prefix_hash when "
                "teacher and rollout saw the same ids)",
            ),
        ),
        key=("run_id", "sample_id", "pos"),
        per_token=True,
    ),
    TableSpec(
        "compactions",
        "one row per context compaction (a summary written, the context rebuilt)",
        (
            RUN_ID,
            STEP,
            SAMPLE_ID,
            _nonneg("parent_sample_id", I64, "sample id of the trajectory's first segment"),
            _nonneg("segment", I32, "segment that ends with the summary", nullable=False),
            _nonneg("context_len_before", I32, "context tokens when compaction triggered"),
            _nonneg("context_len_after", I32, "tokens of the rebuilt context (resume + tail)"),
            _nonneg("summary_len", I32, "generated summary tokens (EOS included)"),
            _nonneg("tail_pairs", I32, "action-observation pairs copied after the summary"),
            _c("summary_finished", BOOL, "the summary ended on EOS"),
        ),
        key=("run_id", "sample_id"),
    ),
    TableSpec(
        "turns",
        "one row per policy turn of a multi-turn sample (async rollout)",
        (
            RUN_ID,
            STEP,
            SAMPLE_ID,
            _nonneg("turn", I32, "turn index", nullable=False),
            _nonneg("worker", I32, "rollout worker that generated the turn", dictionary=True),
            _nonneg("start_pos", I32, "position of the turn's first action token"),
            _nonneg("context_len", I32, "tokens of the context the engine received"),
            _c("context_hash", I64, "prefix hash of the ids the engine received"),
            _c("prefix_hash", I64, "prefix hash of the trajectory before the turn (TITO)"),
            _nonneg("n_action_tokens", I32, "tokens the policy generated"),
            _nonneg("n_observation_tokens", I32, "observation tokens the environment appended"),
            _nonneg("policy_version_first", I64, "weights version of the first token"),
            _nonneg("policy_version_last", I64, "weights version of the last token"),
            _nonneg("kv_version_min", I64, "oldest KV version any token was decoded against"),
            _nonneg("kv_reused_tokens", I32, "context tokens whose KV came from the session cache"),
            _nonneg("env_latency_s", F64, "environment time of the turn"),
            _c(
                "env_event",
                STR,
                "what the environment did (call, answer, env_timeout, ...)",
                dictionary=True,
            ),
            _c("t_request", TS, "turn requested (UTC)"),
            _c("t_gen_start", TS, "generation started (UTC)"),
            _c("t_gen_end", TS, "generation ended (UTC)"),
            _c("t_env_end", TS, "environment answered (UTC)"),
        ),
        key=("run_id", "sample_id", "turn"),
    ),
    TableSpec(
        "reward_components",
        "one row per reward term of a sample",
        (
            RUN_ID,
            SAMPLE_ID,
            _c("component", STR, "reward term name", nullable=False, dictionary=True),
            _c("value", F64, "term value (null: the term could not score the sample)"),
            _c(
                "weight",
                F64,
                "signed term weight: samples.reward = sum(weight * value) over non-null values "
                "(penalties negative)",
            ),
            _c(
                "failure_reason",
                STR,
                "why the term could not score the sample (e.g. judge_unparseable); environment "
                "terms carry the sample's verdict",
            ),
            STEP_OPT,
        ),
        key=("run_id", "sample_id", "component"),
    ),
    TableSpec(
        "teacher_routes",
        "one row per step, domain and teacher the step's samples were routed to",
        (
            RUN_ID,
            STEP,
            _c("domain", STR, "task domain", nullable=False, dictionary=True),
            _c("teacher_id", STR, "teacher the domain routes to", nullable=False, dictionary=True),
            _enum("payload", E.TEACHER_PAYLOADS, "what the teacher sent"),
            _nonneg("n_samples", I64, "samples routed"),
            _nonneg("n_tokens", I64, "tokens scored"),
            _nonneg("payload_bytes", I64, "payload bytes sent for them"),
            _c("reverse_kl", F64, "sampled reverse-KL estimate mean(train_logp - teacher_logp)"),
            _c("opd_adv_mean", F64, "mean OPD advantage w * (teacher_logp - train_logp)"),
            _nonneg("opd_adv_std", F64, "spread (population std) of the OPD advantage"),
            _nonneg("topk_kl", F64, "mean Top-k reverse KL per position, when that term trained"),
        ),
        key=("run_id", "step", "domain", "teacher_id"),
    ),
    TableSpec(
        "topk",
        "Top-k indices per position, train vs rollout",
        (
            RUN_ID,
            STEP,
            SAMPLE_ID,
            _nonneg("layer", I32, "layer (null for the output logits)", dictionary=True),
            POS,
            ENGINE,
            _c("k", I32, "k", nullable=False, min=1, dictionary=True),
            _c("indices", pa.list_(I32), "Top-k indices, best first", nullable=False, min=0),
            _c("index_hash", I64, "hash of the sorted indices"),
            _nonneg("boundary_ties", I32, "candidates tied with the k-th value"),
        ),
        key=("run_id", "sample_id", "layer", "pos", "engine"),
        per_token=True,
    ),
    TableSpec(
        "moe_routes",
        "MoE expert choice per position, train vs rollout",
        (
            RUN_ID,
            STEP,
            SAMPLE_ID,
            _nonneg("layer", I32, "MoE layer", nullable=False, dictionary=True),
            POS,
            ENGINE,
            _c("experts", pa.list_(I16), "chosen experts, best first", nullable=False, min=0),
        ),
        key=("run_id", "sample_id", "layer", "pos", "engine"),
        per_token=True,
    ),
    TableSpec(
        "qparams",
        "quantization parameters per tensor and producer",
        (
            RUN_ID,
            POLICY_VERSION,
            _c("tensor", STR, "parameter name", nullable=False),
            _enum("producer", E.QPARAM_PRODUCERS, "who quantized"),
            _c("bits", I32, "code width", min=1, max=64, dictionary=True),
            _c("qmin", F64, "smallest code value"),
            _c("qmax", F64, "largest code value"),
            _c("group_size", I32, "elements per scale (-1: per channel)", min=-1, dictionary=True),
            _c("symmetric", BOOL, "symmetric quantization"),
            _c("scale_dtype", STR, "dtype of the scales", dictionary=True),
            _c("rounding", STR, "rounding mode", dictionary=True),
            _c("packing", STR, "code packing layout", dictionary=True),
            _c("scale_hash", STR, "hash of the scales"),
            _c("code_hash", STR, "hash of the codes"),
            _nonneg("max_abs_err", F64, "max |dequant - original|"),
            _nonneg("numel", I64, "tensor elements"),
            STEP_OPT,
            _c("spec_name", STR, "quantization spec name", dictionary=True),
            _c("zero_hash", STR, "hash of the zero points (asymmetric only)"),
        ),
        key=("run_id", "policy_version", "tensor", "producer"),
    ),
    TableSpec(
        "weight_syncs",
        "one row per phase of a trainer -> rollout weight sync",
        (
            RUN_ID,
            _nonneg("sync_id", I64, "sync number", nullable=False),
            POLICY_VERSION,
            _enum("phase", E.SYNC_PHASES, "sync phase"),
            _c("ts", TS, "phase end (UTC)", nullable=False),
            _nonneg("bytes", I64, "bytes moved"),
            _c("checksum", STR, "checksum of the payload"),
            _c("engine", STR, "receiving engine", dictionary=True),
            _nonneg("probe_mismatch_abs_max", F64, "max |logp diff| on the post-sync probe"),
            _nonneg("duration_s", F64, "phase duration"),
        ),
        key=("run_id", "sync_id", "engine", "phase"),
    ),
    TableSpec(
        "memory_events",
        "memory ledger events",
        (
            RUN_ID,
            _c("ts", TS, "event time (UTC)", nullable=False),
            STEP_OPT,
            RANK,
            _c("device", STR, "device, e.g. 'cuda:0'", dictionary=True),
            _c("object", STR, "what the bytes hold"),
            CATEGORY,
            _enum("event", E.MEMORY_EVENTS, "ledger event"),
            _nonneg("bytes", I64, "bytes", nullable=False),
            _c("logical_shape", pa.list_(I64), "logical tensor shape", min=0),
            _c("dtype", STR, "element dtype", dictionary=True),
            _c("layout", STR, "memory layout", dictionary=True),
            _c("producer", STR, "component that produced it", dictionary=True),
            _c("consumer", STR, "component that consumes it", dictionary=True),
            OWNER,
            _nonneg("event_id", I64, "event number"),
            _c("persistent", BOOL, "lives across steps"),
            _c("device_kind", STR, "'cpu', 'cuda', 'npu', ...", dictionary=True),
        ),
        key=("run_id", "rank", "event_id"),
    ),
    TableSpec(
        "memory_peaks",
        "peak bytes per step, rank, category and owner",
        (
            RUN_ID,
            STEP,
            RANK,
            CATEGORY,
            OWNER,
            _c(
                "bytes",
                I64,
                "bytes at the step's peak instant; null = not measured (allocator on the CPU, "
                "operator workspace); the runtime_margin/untracked line (measured - tracked) "
                "may be negative",
            ),
        ),
        key=("run_id", "step", "rank", "category", "owner"),
    ),
    TableSpec(
        "evals",
        "one row per evaluation",
        (
            RUN_ID,
            STEP,
            POLICY_VERSION,
            _c("split", STR, "eval split", nullable=False, dictionary=True),
            _nonneg("n", I64, "evaluated samples"),
            _frac("accuracy", "accuracy"),
            _c("reward_mean", F64, "mean reward"),
        ),
        key=("run_id", "step", "split"),
    ),
    TableSpec(
        "contract_results",
        "one row per contract check",
        (
            RUN_ID,
            _c("checked_at", TS, "check time (UTC)", nullable=False),
            _c("contract", STR, "contract name", nullable=False, dictionary=True),
            _c("check", STR, "check name", nullable=False, dictionary=True),
            _enum("status", E.CONTRACT_STATUSES, "outcome"),
            _c("observed", F64, "observed value"),
            _c("threshold", F64, "threshold it was compared with"),
            _nonneg("n_rows", I64, "rows checked"),
            _nonneg("n_violations", I64, "rows violating"),
            _c("example", STR, "a violating example", json=True),
            STEP_OPT,
        ),
        key=("run_id", "contract", "check", "checked_at"),
    ),
)

TABLES: MappingProxyType[str, TableSpec] = MappingProxyType({t.name: t for t in _TABLES})
"""Every telemetry table by name, in a stable order."""


ENUMS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {f"{t.name}.{c.name}": c.enum for t in TABLES.values() for c in t.columns if c.enum is not None}
)
"""Every enum column (``"table.column"``) and its allowed values."""


def table_spec(name: str) -> TableSpec:
    """The spec of ``name``; ValueError listing the valid tables on a typo."""
    try:
        return TABLES[name]
    except KeyError:
        raise ValueError(f"unknown telemetry table {name!r}; tables: {', '.join(TABLES)}") from None
