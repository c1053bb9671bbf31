"""The schema is the public interface: pin the issue's column names, types and enums."""

import pyarrow as pa
import pytest

from observability.schema import ENUMS, SCHEMA_VERSION, TABLES, table_spec

# Column names the issue fixes (users' SQL and notebooks depend on them); extras may be added.
PUBLIC = {
    "runs": "run_id schema_version started_at config git_sha device world_size algorithm "
    "tokenizer_rev chat_template_rev status ended_at vocab_size run_dir icepop_beta dis_eps_low "
    "dis_eps_high staleness_limit",
    "steps": "run_id step rank policy_version wall_time loss policy_loss entropy grad_norm lr "
    "reward_mean reward_std n_tokens n_loss_tokens n_trusted_tokens masked_fraction "
    "icepop_masked_fraction clip_fraction mismatch_abs_mean mismatch_abs_p99 staleness_max "
    "degenerate_group_fraction step_time_s rollout_time_s train_time_s peak_memory_bytes "
    "topk_agreement route_agreement teacher_mismatch_abs_mean dis_low_fraction dis_high_fraction "
    "stale_fraction eval_accuracy retokenized_fraction kl_ref teacher_payload teacher_payload_bytes "
    "teacher_kl distill_loss judge_verifier_agreement",
    "samples": "run_id sample_id step prompt_id group_id domain engine policy_version_rollout "
    "policy_version_train staleness reward advantage n_prompt_tokens n_response_tokens status "
    "failure_reason tokenizer_rev chat_template_rev sampling teacher_id response_text finish_reason",
    "tokens": "run_id step sample_id pos token_id role loss_mask rollout_logp train_logp old_logp "
    "teacher_logp ratio trust_mask mask_reason advantage entropy prefix_hash "
    "policy_version_rollout train_token_id teacher_id teacher_prefix_hash",
    "reward_components": "run_id sample_id component value weight failure_reason",
    "topk": "run_id step sample_id layer pos engine k indices index_hash boundary_ties",
    "moe_routes": "run_id step sample_id layer pos engine experts",
    "qparams": "run_id policy_version tensor producer bits qmin qmax group_size symmetric "
    "scale_dtype rounding packing scale_hash code_hash max_abs_err numel step spec_name zero_hash",
    "weight_syncs": "run_id sync_id policy_version phase ts bytes checksum engine "
    "probe_mismatch_abs_max",
    "memory_events": "run_id ts step rank device object category event bytes logical_shape dtype "
    "layout producer consumer owner event_id persistent device_kind",
    "memory_peaks": "run_id step rank category owner bytes",
    "train_logprobs": "run_id step rank policy_version tp_size sample_id pos token_id logp "
    "logsumexp",
    "evals": "run_id step policy_version split n accuracy reward_mean",
    "contract_results": "run_id checked_at contract check status observed threshold n_rows "
    "n_violations example",
    # schema version 2 (async agentic RL)
    "turns": "run_id step sample_id turn worker start_pos context_len context_hash prefix_hash "
    "n_action_tokens n_observation_tokens policy_version_first policy_version_last "
    "kv_version_min kv_reused_tokens env_latency_s env_event t_request t_gen_start t_gen_end "
    "t_env_end",
    # schema version 3 (critic and compaction)
    "compactions": "run_id step sample_id parent_sample_id segment context_len_before "
    "context_len_after summary_len tail_pairs summary_finished",
    # schema version 4 (teachers and mixed rewards)
    "teacher_routes": "run_id step domain teacher_id payload n_samples n_tokens payload_bytes "
    "reverse_kl opd_adv_mean opd_adv_std topk_kl",
}
AGENTIC = {  # columns schema version 2 added to existing tables
    "steps": "queue_depth in_flight worker_busy_fraction rollout_wait_s n_env_failures "
    "n_refilled n_groups_dropped n_weight_switches optimizer_reset",
    "samples": "worker env_latency_s refill policy_version_rollout_max",
    "tokens": "turn kv_version",
}


TEACHERS = {  # columns schema version 4 (teachers and mixed rewards) added to existing tables
    "steps": "teacher_payload teacher_payload_bytes teacher_kl distill_loss "
    "judge_verifier_agreement",
    "tokens": "teacher_prefix_hash",
}


def test_schema_version_2_and_4_columns():
    assert SCHEMA_VERSION >= 4
    for name, cols in AGENTIC.items():
        assert set(cols.split()) <= set(TABLES[name].column_names), name
    for name, cols in TEACHERS.items():
        assert set(cols.split()) <= set(TABLES[name].column_names), name


LONG_HORIZON = {  # columns schema version 3 (critic and compaction) added to existing tables
    "steps": "value_loss value_explained_variance critic_grad_norm critic_updates "
    "critic_frozen_checksum loss_denominator n_trajectories",
    "tokens": "value return segment",
}


def test_critic_and_compaction_columns():
    assert SCHEMA_VERSION >= 3
    for name, cols in LONG_HORIZON.items():
        assert set(cols.split()) <= set(TABLES[name].column_names), name
    for col in ("value", "return"):
        spec = TABLES["tokens"].column(col)
        assert spec.finite and spec.nullable and spec.type == pa.float32()


def test_every_public_column_exists_and_names_are_unique():
    assert set(TABLES) == set(PUBLIC)
    for name, cols in PUBLIC.items():
        spec = TABLES[name]
        assert len(set(spec.column_names)) == len(spec.column_names)
        missing = set(cols.split()) - set(spec.column_names)
        assert not missing, (name, missing)
        assert spec.column_names[0] == "run_id"
        assert set(spec.key) <= set(spec.column_names)


def test_enums_match_the_issue():
    assert ENUMS["runs.status"] == ("running", "finished", "failed")
    assert ENUMS["tokens.role"] == ("prompt", "action", "observation", "summary", "padding", "tail")
    assert set(ENUMS["tokens.mask_reason"]) == {
        "kept", "icepop", "dis_low", "dis_high", "not_action", "stale", "dropped"
    }  # fmt: skip
    assert ENUMS["contract_results.status"] == ("pass", "fail", "warn", "error", "not_applicable")
    assert ENUMS["topk.engine"] == ENUMS["moe_routes.engine"] == ("train", "rollout")
    assert len(ENUMS["memory_events.category"]) == 7
    assert ENUMS["weight_syncs.phase"][0] == "gather"


def test_types_and_rules_of_key_columns():
    tokens = TABLES["tokens"]
    assert tokens.column("token_id").below_vocab and tokens.column("token_id").min == 0
    for logp in ("rollout_logp", "train_logp", "old_logp", "teacher_logp"):
        col = tokens.column(logp)
        assert col.finite and col.max == 0.0 and col.nullable and col.type == pa.float32()
    assert TABLES["moe_routes"].column("experts").type == pa.list_(pa.int16())
    assert TABLES["topk"].column("indices").is_list
    assert TABLES["memory_events"].column("persistent").type == pa.bool_()
    assert TABLES["steps"].column("wall_time").type == pa.timestamp("us", tz="UTC")
    assert tokens.per_token and TABLES["topk"].per_token and not TABLES["samples"].per_token
    for spec in TABLES.values():
        for c in spec.columns:
            if "version" in c.name and c.name != "schema_version":
                assert c.min == 0, (spec.name, c.name)
            if c.name == "bytes" and spec.name != "memory_peaks":
                assert c.min == 0
    # memory_peaks.bytes: null = "not measured" (allocator on the CPU); the untracked remainder
    # (measured − tracked) may be negative, so that one column is signed and nullable.
    assert TABLES["memory_peaks"].column("bytes").nullable


def test_arrow_schema_and_empty_table():
    schema = TABLES["steps"].arrow_schema
    assert schema.metadata[b"closedloop.schema_version"] == str(SCHEMA_VERSION).encode()
    assert not schema.field("step").nullable and schema.field("loss").nullable
    empty = TABLES["steps"].empty_table()
    assert empty.num_rows == 0 and empty.schema.equals(schema)
    assert "run_id" in TABLES["tokens"].dictionary_columns
    assert "rollout_logp" not in TABLES["tokens"].dictionary_columns


def test_unknown_table_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown telemetry table 'tokenz'.*tokens"):
        table_spec("tokenz")


PROVENANCE_AND_STEP_SIZE = {  # columns schema version 6 added to existing tables
    "teacher_routes": "teacher_domains teacher_source_sha256 teacher_config_sha256 "
    "student_source_sha256 declared_source",
    "steps": "update_norm param_norm",
}


def test_schema_version_6_columns():
    assert SCHEMA_VERSION >= 6
    for name, cols in PROVENANCE_AND_STEP_SIZE.items():
        assert set(cols.split()) <= set(TABLES[name].column_names), name
    assert ENUMS["teacher_routes.declared_source"] == ("same", "off")
    assert TABLES["teacher_routes"].column("teacher_domains").type == pa.list_(pa.string())
    assert TABLES["steps"].column("update_norm").min == 0
