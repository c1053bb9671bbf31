"""Runs from the real training core and store: a clean run passes, each injected violation fails
exactly its check with the injected row as the example.

Every test copies the session's tiny run, injects one violation (editing Parquet parts, or
appending rows through the real writer) and gates the copy.
"""

import polars as pl
import pytest

from contracts import run_gate
from contracts.report import format_table
from tests.contracts.store_edit import append_rows, copy_run, edit_rows, query

pytestmark = pytest.mark.slow

# Checks whose data every tiny GRPO run has: they must pass, not be skipped.
ALWAYS_APPLICABLE = [
    "schema.store_readable",
    "schema.tokens",
    "schema.samples",
    "schema.steps",
    "action.logp_finite",
    "action.loss_mask_on_actions",
    "action.tito_exact_ids",
    "action.run_metadata_consistent",
    "action.trust_mask_recomputed",
    "action.mismatch_abs_mean",
    "action.masked_fraction",
    "sparse_version.staleness_within_limit",
    "sparse_version.sync_complete",
]


def failing(gate) -> set[str]:
    return {r.id for r in gate.results if r.failed}


def gate_failing_only(run, expected: set[str]):
    gate = run_gate(run)
    assert failing(gate) == expected, format_table(gate)
    return gate


@pytest.fixture
def run(tiny_run, tmp_path):
    return copy_run(tiny_run, tmp_path)


def action_token(run, index: int = 0) -> tuple[int, int]:
    rows = query(
        run, "SELECT sample_id, pos FROM tokens WHERE role = 'action' ORDER BY sample_id, pos"
    )
    return rows[index]["sample_id"], rows[index]["pos"]


def at(sample_id: int, pos: int) -> pl.Expr:
    return (pl.col("sample_id") == sample_id) & (pl.col("pos") == pos)


def test_clean_run_passes_every_applicable_check(run):
    gate = gate_failing_only(run, set())
    status = {r.id: r.status for r in gate.results}
    assert {c: status[c] for c in ALWAYS_APPLICABLE} == dict.fromkeys(ALWAYS_APPLICABLE, "pass")
    assert set(status.values()) <= {"pass", "not_applicable", "warn"}
    recorded = query(run, "SELECT status, count(*) AS n FROM contract_results GROUP BY ALL")
    assert sum(r["n"] for r in recorded) == len(gate.results)


def test_nan_log_prob_fails_logp_finite_and_the_tokens_schema(run):
    s, p = action_token(run, 3)
    assert edit_rows(run, "tokens", at(s, p), {"train_logp": float("nan")}) == 1
    gate = gate_failing_only(run, {"action.logp_finite", "schema.tokens"})
    (ex,) = gate.result("action.logp_finite").examples
    assert (ex["sample_id"], ex["pos"], ex["train_logp"]) == (s, p, "nan")
    (ex,) = gate.result("schema.tokens").examples
    assert (ex["sample_id"], ex["pos"], ex["column"], ex["check"]) == (s, p, "train_logp", "finite")


def test_observation_token_in_the_loss_fails_loss_mask(run):
    s, _ = action_token(run, 0)
    n = edit_rows(run, "tokens", at(s, 2), {"role": "observation", "loss_mask": True})
    assert n == 1  # pos 2 is a prompt token (chat template header)
    # caught three times: loss only on actions, (the agentic contract) never on observations,
    # and (the long-horizon contract) never on prompt, observation or copied-tail tokens
    gate = gate_failing_only(
        run,
        {
            "action.loss_mask_on_actions",
            "agentic.observations_not_in_loss",
            "long_horizon.untrained_roles_not_in_loss",
        },
    )
    (ex,) = gate.result("action.loss_mask_on_actions").examples
    assert (ex["sample_id"], ex["pos"], ex["role"], ex["loss_mask"]) == (s, 2, "observation", True)
    (ex,) = gate.result("agentic.observations_not_in_loss").examples
    assert (ex["sample_id"], ex["pos"], ex["loss_mask"]) == (s, 2, True)


def test_retokenized_id_fails_tito(run):
    s, p = action_token(run, 5)
    (tok,) = query(run, f"SELECT token_id FROM tokens WHERE sample_id = {s} AND pos = {p}")
    other = (tok["token_id"] + 1) % 300
    assert edit_rows(run, "tokens", at(s, p), {"train_token_id": other}) == 1
    gate = gate_failing_only(run, {"action.tito_exact_ids"})
    (ex,) = gate.result("action.tito_exact_ids").examples
    assert (ex["sample_id"], ex["pos"], ex["train_token_id"]) == (s, p, other)


def test_flipped_trust_mask_fails_the_recomputed_mask(run):
    s, p = action_token(run, 7)
    edit_rows(run, "tokens", at(s, p), {"trust_mask": False, "mask_reason": "icepop"})
    gate = gate_failing_only(run, {"action.trust_mask_recomputed"})
    (ex,) = gate.result("action.trust_mask_recomputed").examples
    assert (ex["sample_id"], ex["pos"], ex["expected_reason"]) == (s, p, "kept")


def test_other_tokenizer_revision_fails_metadata(run):
    edit_rows(run, "samples", pl.col("sample_id") == 9, {"tokenizer_rev": "other-rev"})
    gate = gate_failing_only(run, {"action.run_metadata_consistent"})
    (ex,) = gate.result("action.run_metadata_consistent").examples
    assert (ex["sample_id"], ex["tokenizer_rev"]) == (9, "other-rev")


def test_stale_sample_fails_staleness(run):
    (row,) = query(run, "SELECT min(sample_id) AS s FROM samples WHERE status = 'trained'")
    (tau,) = query(run, "SELECT staleness_limit AS t FROM runs")
    edit_rows(run, "samples", pl.col("sample_id") == row["s"], {"staleness": tau["t"] + 1})
    gate = gate_failing_only(run, {"sparse_version.staleness_within_limit"})
    r = gate.result("sparse_version.staleness_within_limit")
    assert (r.observed, r.threshold, r.n_violations) == (tau["t"] + 1, tau["t"], 1)
    assert r.examples[0]["sample_id"] == row["s"]


def test_dropped_ack_fails_sync_complete(run):
    dropped = (pl.col("phase") == "ack") & (pl.col("policy_version") == 1)
    assert edit_rows(run, "weight_syncs", dropped, drop=True) == 1
    gate = gate_failing_only(run, {"sparse_version.sync_complete"})
    r = gate.result("sparse_version.sync_complete")
    (n,) = query(
        run,
        "SELECT count(*) AS n FROM samples WHERE status = 'trained' AND policy_version_rollout = 1",
    )
    assert r.n_violations == n["n"] > 0
    (ex,) = r.examples  # one example per version
    assert ex["policy_version_rollout"] == 1
    assert "ack" not in ex["syncs"][0]["phases"]


def topk_rows(
    sample_id: int, positions: list[int], train: list[list[int]], rollout: list[list[int]]
):
    n = len(positions)
    return {
        "step": [0] * 2 * n,
        "sample_id": [sample_id] * 2 * n,
        "layer": [900] * 2 * n,  # a layer the tiny model lacks: never collides with core rows
        "pos": positions * 2,
        "engine": ["train"] * n + ["rollout"] * n,
        "k": [4] * 2 * n,
        "indices": train + rollout,
        "boundary_ties": [0] * 2 * n,
    }


def test_flipped_topk_index_fails_topk_sets(run):
    s, p = action_token(run, 0)
    same = [[7, 1, 30, 4], [2, 9, 5, 11]]
    # Sets compare unordered: [1, 4, 7, 30] in another order is still equal.
    append_rows(run, {"topk": topk_rows(s, [p, p + 1], same, [[30, 7, 4, 1], same[1]])})
    assert run_gate(run).result("sparse_version.topk_index_sets_equal").status == "pass"
    append_rows(run, {"topk": topk_rows(s, [p + 2], [[3, 8, 12, 40]], [[3, 8, 12, 41]])})
    gate = gate_failing_only(run, {"sparse_version.topk_index_sets_equal"})
    (ex,) = gate.result("sparse_version.topk_index_sets_equal").examples
    assert (ex["sample_id"], ex["layer"], ex["pos"]) == (s, 900, p + 2)
    assert (ex["train_only"], ex["rollout_only"]) == ([40], [41])


def qparams_rows(version: int, tensors: list[str]):
    rows = {
        k: []
        for k in (
            "policy_version",
            "tensor",
            "producer",
            "bits",
            "qmin",
            "qmax",
            "group_size",
            "symmetric",
            "scale_dtype",
            "rounding",
            "packing",
            "scale_hash",
            "code_hash",
            "numel",
        )
    }
    for t in tensors:
        for producer in ("qat_fake", "offline_real"):
            for k, v in (
                ("policy_version", version),
                ("tensor", t),
                ("producer", producer),
                ("bits", 4),
                ("qmin", -8.0),
                ("qmax", 7.0),
                ("group_size", 32),
                ("symmetric", True),
                ("scale_dtype", "float32"),
                ("rounding", "rne"),
                ("packing", "int4x2"),
                ("scale_hash", f"s-{t}"),
                ("code_hash", f"c-{t}"),
                ("numel", 4096),
            ):
                rows[k].append(v)
    return rows


def test_changed_quantization_code_fails_bit_identity(run):
    append_rows(run, {"qparams": qparams_rows(1, ["ct.w0", "ct.w1"])})
    assert run_gate(run).result("teacher_quant.quant_bit_identical").status == "pass"
    changed = (pl.col("tensor") == "ct.w1") & (pl.col("producer") == "offline_real")
    assert edit_rows(run, "qparams", changed, {"code_hash": "c-flipped"}) == 1
    gate = gate_failing_only(run, {"teacher_quant.quant_bit_identical"})
    (ex,) = gate.result("teacher_quant.quant_bit_identical").examples
    assert (ex["policy_version"], ex["tensor"], ex["differing_columns"]) == (
        1,
        "ct.w1",
        ["code_hash"],
    )


def memory_rows(events: list[tuple[str, str, bool]]):
    """(object, event, persistent) in order -> memory_events columns."""
    n = len(events)
    return {
        "ts": [1.8e9 + i for i in range(n)],
        "step": [0] * n,
        "device": ["cpu"] * n,
        "object": [o for o, _, _ in events],
        "category": ["saved_activations"] * n,
        "event": [e for _, e, _ in events],
        "bytes": [1024] * n,
        "producer": ["actor.forward"] * n,
        "consumer": ["actor.backward"] * n,
        "owner": ["actor"] * n,
        "event_id": [10_000 + i for i in range(n)],
        "persistent": [p for _, _, p in events],
    }


def test_leaked_memory_object_fails_create_has_free(run):
    events = [
        ("ct.a", "create", False),
        ("ct.b", "create", False),
        ("ct.a", "free", False),
        ("ct.w", "create", True),
        ("ct.b", "free", False),
        ("ct.a", "create", False),
        ("ct.a", "free", False),
    ]
    append_rows(run, {"memory_events": memory_rows(events)})
    gate = run_gate(run)
    assert {
        gate.result(f"memory.{c}").status
        for c in ("create_has_free", "no_double_free", "attribution_complete")
    } == {"pass"}
    leaked = (pl.col("object") == "ct.b") & (pl.col("event") == "free")
    assert edit_rows(run, "memory_events", leaked, drop=True) == 1
    gate = gate_failing_only(run, {"memory.create_has_free"})
    (ex,) = gate.result("memory.create_has_free").examples
    assert (ex["object"], ex["event"], ex["next_event"]) == ("ct.b", "create", None)


def test_double_free_and_missing_owner(run):
    events = [("ct.x", "create", False), ("ct.x", "free", False), ("ct.x", "free", False)]
    cols = memory_rows(events)
    cols["owner"] = ["actor", None, "actor"]
    append_rows(run, {"memory_events": cols})
    gate = gate_failing_only(run, {"memory.no_double_free", "memory.attribution_complete"})
    (ex,) = gate.result("memory.no_double_free").examples
    assert (ex["object"], ex["event_id"], ex["prev_event"]) == ("ct.x", 10_002, "free")
    (ex,) = gate.result("memory.attribution_complete").examples
    assert (ex["object"], ex["event_id"], ex["owner"]) == ("ct.x", 10_001, None)


def test_peak_breakdown_must_sum_to_the_peak(run):
    # Tracked lines 300 + 200 = 500; allocator and untracked lines are not part of the sum.
    (base,) = query(
        run,
        "SELECT coalesce(sum(bytes) FILTER (WHERE category <> 'allocator' AND "
        "owner NOT IN ('untracked', 'not_measured')), 0) AS b FROM memory_peaks "
        "WHERE step = 0 AND rank = 0",
    )
    lines = {
        "step": [0] * 4,
        "category": ["model_state", "saved_activations", "allocator", "runtime_margin"],
        "owner": ["ct.actor", "ct.actor", "allocator", "untracked"],
        "bytes": [300, 200, 64, -10],
    }
    append_rows(run, {"memory_peaks": lines})
    step0 = (pl.col("step") == 0) & (pl.col("rank") == 0)
    edit_rows(run, "steps", step0, {"peak_memory_bytes": base["b"] + 500})
    assert run_gate(run).result("memory.peak_breakdown_sums").status == "pass"
    edit_rows(run, "steps", step0, {"peak_memory_bytes": base["b"] + 501})
    gate = gate_failing_only(run, {"memory.peak_breakdown_sums"})
    (ex,) = gate.result("memory.peak_breakdown_sums").examples
    assert (ex["step"], ex["rank"], ex["difference"]) == (0, 0, -1)


def test_teacher_scored_sample_missing_one_teacher_log_prob(run):
    s, _ = action_token(run, 0)
    actions = query(
        run, f"SELECT pos FROM tokens WHERE sample_id = {s} AND role = 'action' ORDER BY pos"
    )
    last = actions[-1]["pos"]
    edit_rows(run, "samples", pl.col("sample_id") == s, {"teacher_id": "ct-teacher"})
    scored = (pl.col("sample_id") == s) & (pl.col("role") == "action") & (pl.col("pos") != last)
    edit_rows(run, "tokens", scored, {"teacher_logp": -1.0})
    # the injected sample also has no route row and its tokens no teacher prefix hash: the
    # route and same-ids checks fail too (tests/contracts/test_teacher_injections.py injects
    # each of those alone into a real teacher run)
    gate = gate_failing_only(
        run,
        {
            "teacher_quant.teacher_logps_present",
            "teacher_quant.teacher_routes_traceable",
            "teacher_quant.teacher_same_ids",
        },
    )
    (ex,) = gate.result("teacher_quant.teacher_logps_present").examples
    assert (ex["sample_id"], ex["n_missing_teacher_logp"], ex["first_missing_pos"]) == (s, 1, last)
