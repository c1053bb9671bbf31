"""Runs with teachers and mixed rewards through the real loop and store: what telemetry holds,
the gate, and the memory ledger's teacher owners."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import run_gate
from contracts.report import format_table
from observability import open_run
from tests.conftest import make_run

pytestmark = pytest.mark.slow

TEACHER_CHECKS = (
    "teacher_quant.teacher_logps_present",
    "teacher_quant.teacher_routes_traceable",
    "teacher_quant.teacher_same_ids",
    "reward.total_recomputes",
    "reward.failed_components_have_reasons",
)


def test_teacher_run_passes_the_gate_with_every_teacher_check_applicable(teacher_run):
    gate = run_gate(teacher_run)
    assert gate.exit_code == 0, format_table(gate)
    status = {r.id: r.status for r in gate.results}
    assert {c: status[c] for c in TEACHER_CHECKS} == dict.fromkeys(TEACHER_CHECKS, "pass")


def test_routes_payload_and_top_k_term_in_telemetry(teacher_run):
    con = open_run(teacher_run)
    # every sample is routed by its domain; addition and subtraction go to different teachers
    routes = con.execute(
        "SELECT domain, list(DISTINCT teacher_id) FROM samples GROUP BY domain ORDER BY 1"
    ).fetchall()
    assert [d for d, _ in routes] == ["addition", "subtraction"]
    assert all(len(t) == 1 for _, t in routes) and routes[0][1] != routes[1][1]
    # Top-k payload with K = 4: 4 × (4 B id + 4 B log-prob) + 4 B sampled log-prob per token
    rows = con.execute(
        "SELECT s.step, s.teacher_payload, s.teacher_payload_bytes, sum(r.payload_bytes), "
        "sum(r.n_tokens) FROM steps s JOIN teacher_routes r USING (step) GROUP BY ALL ORDER BY 1"
    ).fetchall()
    assert len(rows) == 3
    for _step, mode, total, by_route, n_tokens in rows:
        assert mode == "topk" and total == by_route == n_tokens * 36
    # teacher log-probs exactly on the generated tokens, with their teacher's id
    ((n_gen, n_lp, n_id),) = con.execute(
        "SELECT count(*) FILTER (WHERE role = 'action'), count(teacher_logp), "
        "count(*) FILTER (WHERE teacher_id IS NOT NULL AND role = 'action') FROM tokens"
    ).fetchall()
    assert n_gen == n_lp == n_id > 0
    # the Top-k term trained (weighted 0.5) next to the GRPO policy term
    for loss, policy, distill in con.execute(
        "SELECT loss, policy_loss, distill_loss FROM steps"
    ).fetchall():
        assert distill is not None and distill >= 0
        assert loss == pytest.approx(policy + distill, abs=1e-6)
    # the same-source teacher starts at KL ~0, the perturbed one does not
    kl = dict(
        con.execute(
            "SELECT domain, reverse_kl FROM teacher_routes WHERE step = 0 ORDER BY domain"
        ).fetchall()
    )
    assert abs(kl["addition"]) < 1e-5 < 0.02 < kl["subtraction"]


def test_teachers_own_their_weights_in_the_memory_ledger(teacher_run):
    con = open_run(teacher_run)
    owners = con.execute(
        "SELECT owner, category, bool_and(persistent), count(*) FROM memory_events "
        "WHERE owner LIKE 'teacher/%' AND event = 'create' GROUP BY ALL ORDER BY 1, 2"
    ).fetchall()
    by = {(o, c): (p, n) for o, c, p, n in owners}
    teachers = {o for o, _ in by}
    assert len(teachers) == 2
    for t in teachers:
        assert by[(t, "model_state")][0] is True  # weights: persistent, the teacher's own
        assert (t, "saved_activations") in by  # its prefill KV caches
    ((payloads,),) = con.execute(
        "SELECT count(*) FROM memory_events WHERE object LIKE 'teacher/%/payload' "
        "AND event = 'create'"
    ).fetchall()
    assert payloads == 6  # two teachers × three steps


def test_opd_alone_with_group_size_one(tmp_path, teacher_dirs):
    run = make_run(
        tmp_path,
        [
            'algorithm.advantage="opd"',
            "algorithm.group_size=1",
            "algorithm.prompts_per_step=12",
            f'teachers.routes={{"*" = "{teacher_dirs["other"]}"}}',
        ],
        name="opd",
    )
    con = open_run(run)
    ((n, groups),) = con.execute(
        "SELECT count(*), count(DISTINCT group_id) FROM samples"
    ).fetchall()
    assert n == groups == 36  # 12 prompts × 1 response × 3 steps: one sample per group
    # Â_t = teacher_logp − train_logp on every generated token (w = 1), the sampled loss only
    ((worst, n_adv),) = con.execute(
        "SELECT max(abs(advantage - (teacher_logp - train_logp))), count(advantage) FROM tokens "
        "WHERE role = 'action'"
    ).fetchall()
    assert n_adv > 0 and worst < 1e-5
    steps = con.execute(
        "SELECT policy_loss, distill_loss, degenerate_group_fraction, teacher_payload FROM steps"
    ).fetchall()
    assert all(p is not None and d is None and g is None and m == "sampled" for p, d, g, m in steps)
    assert run_gate(run).exit_code == 0


@pytest.mark.parametrize("config", ["opd_tiny", "mopd_tiny"])
def test_shipped_opd_configs_run_with_telemetry(config, tmp_path, teacher_dirs):
    """``configs/opd_tiny.toml`` and ``configs/mopd_tiny.toml`` as shipped, short, with the test
    teachers in place of the trained experts (their routes are the only override)."""
    from core.config import load_config
    from core.driver import run_training

    root = Path(__file__).resolve().parents[3] / "configs"
    cfg = load_config(root / f"{config}.toml")
    routes = {d: str(teacher_dirs["other"]) for d in cfg.teachers.routes}
    table = ", ".join(f'{d} = "{p}"' for d, p in routes.items())
    cfg = load_config(
        root / f"{config}.toml",
        [
            f"teachers.routes={{{table}}}",
            "train.steps=2",
            "algorithm.prompts_per_step=8",
            "train.eval_size=16",
            "train.eval_every=0",
        ],
    )
    run, summary = run_training(cfg, runs_root=tmp_path, telemetry="duckdb", name=config)
    assert set(summary["eval_by_domain_end"]) == set(routes)
    assert run_gate(run).exit_code == 0
    con = open_run(run)
    domains = {d for (d,) in con.execute("SELECT DISTINCT domain FROM teacher_routes").fetchall()}
    assert domains == set(routes)
