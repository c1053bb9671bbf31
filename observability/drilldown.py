"""Where to look next for a suspect: the SQL over ``open_run`` views, and the notebook cell.

``drilldown(suspect, run_id)`` returns a ``Drilldown`` whose query runs as it is on the run's
connection (``observability.open_run(RUN).sql(query)``; the run id is inlined as a literal) and
whose ``notebook`` names the section of ``notebooks/investigate_collapse.ipynb`` that plots it.
Per-route and per-component suspects (``opd_signal:``, ``teacher_kl:``, ``reward_component:``,
``reward_falling:``) are matched by prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

NOTEBOOK = "notebooks/investigate_collapse.ipynb"


@dataclass(frozen=True)
class Drilldown:
    query: str
    """DuckDB SQL over the run's views."""
    notebook: str
    """Notebook and section to open next."""


_TOKENS = f"{NOTEBOOK} § Token drill-down (A.token_drilldown(con, step=STEP))"
_SUSPECTS = f"{NOTEBOOK} § Suspects (A.suspect_levels(con))"

_BY_NAME = {
    "retokenized_tokens": (
        "SELECT step, sample_id, pos, token_id, train_token_id FROM tokens WHERE run_id = {rid} "
        "AND role = 'action' AND train_token_id <> token_id ORDER BY step, sample_id, pos LIMIT 50",
        _TOKENS,
    ),
    "staleness": (
        "SELECT step, staleness, status, count(*) AS n, avg(reward) AS reward FROM samples "
        "WHERE run_id = {rid} GROUP BY ALL ORDER BY step, staleness",
        _SUSPECTS,
    ),
    "train_rollout_mismatch": (
        "SELECT step, avg(abs(train_logp - rollout_logp)) AS mismatch, "
        "max(abs(train_logp - rollout_logp)) AS worst FROM tokens WHERE run_id = {rid} "
        "AND role = 'action' GROUP BY step ORDER BY step",
        _TOKENS,
    ),
    "masked_fraction": (
        "SELECT step, mask_reason, count(*) AS n FROM tokens WHERE run_id = {rid} "
        "AND role = 'action' GROUP BY ALL ORDER BY step, mask_reason",
        _TOKENS,
    ),
    "topk_disagreement": (
        "SELECT a.step, a.sample_id, a.pos, a.indices AS train, b.indices AS rollout FROM topk a "
        "JOIN topk b USING (run_id, sample_id, pos) WHERE a.run_id = {rid} AND a.engine = 'train' "
        "AND b.engine = 'rollout' AND a.index_hash <> b.index_hash ORDER BY 1, 2, 3 LIMIT 50",
        _TOKENS,
    ),
    "quantization_error": (
        "SELECT policy_version, producer, tensor, max_abs_err FROM qparams WHERE run_id = {rid} "
        "ORDER BY max_abs_err DESC LIMIT 20",
        _SUSPECTS,
    ),
    "kv_version_mismatch": (
        "SELECT step, sample_id, pos, policy_version_rollout, kv_version FROM tokens "
        "WHERE run_id = {rid} AND role = 'action' AND kv_version <> policy_version_rollout "
        "ORDER BY step, sample_id, pos LIMIT 50",
        _TOKENS,
    ),
    "history_retokenized": (
        "SELECT step, sample_id, turn, context_hash, prefix_hash FROM turns WHERE run_id = {rid} "
        "AND context_hash <> prefix_hash ORDER BY step, sample_id, turn LIMIT 50",
        _SUSPECTS,
    ),
    "zero_variance_groups": (
        "SELECT step, group_id, count(*) AS n, min(reward) AS min_reward, max(reward) AS "
        "max_reward FROM samples WHERE run_id = {rid} GROUP BY step, group_id HAVING count(*) >= 2 "
        "ORDER BY step, group_id",
        _SUSPECTS,
    ),
    "clip_fraction": (
        "SELECT step, clip_fraction, masked_fraction, lr, grad_norm FROM steps "
        "WHERE run_id = {rid} ORDER BY step",
        _SUSPECTS,
    ),
    "advantage_magnitude": (
        "SELECT step, avg(abs(advantage)) AS abs_advantage, avg(reward) AS reward, "
        "stddev_pop(reward) AS reward_std FROM samples WHERE run_id = {rid} GROUP BY step "
        "ORDER BY step",
        _SUSPECTS,
    ),
    **dict.fromkeys(
        ("update_size", "learning_rate", "grad_norm", "adam_reset"),
        (
            "SELECT step, lr, grad_norm, update_norm, param_norm, update_norm / param_norm AS "
            "update_ratio, optimizer_reset FROM steps WHERE run_id = {rid} ORDER BY step",
            _SUSPECTS,
        ),
    ),
    "critic_explained_variance": (
        "SELECT step, value_loss, value_explained_variance, critic_grad_norm FROM steps "
        "WHERE run_id = {rid} ORDER BY step",
        _SUSPECTS,
    ),
}

_ROUTE = (
    "SELECT step, n_tokens, reverse_kl, opd_adv_mean, opd_adv_std, topk_kl FROM teacher_routes "
    "WHERE run_id = {rid} AND domain = {a} AND teacher_id = {b} ORDER BY step"
)
_COMPONENT = (
    "SELECT step, avg(value) AS value, any_value(weight) AS weight, "
    "avg(coalesce(weight * value, 0.0)) AS contribution, count(*) FILTER (WHERE value IS NULL) "
    "AS failures FROM reward_components WHERE run_id = {rid} AND component = {a} "
    "GROUP BY step ORDER BY step"
)
_BY_PREFIX = {
    "opd_signal:": _ROUTE,
    "teacher_kl:": _ROUTE,
    "reward_component:": _COMPONENT,
    "reward_falling:": _COMPONENT,
}


def sql_literal(value: str) -> str:
    """``value`` as a SQL string literal (single quotes doubled)."""
    return "'" + str(value).replace("'", "''") + "'"


def drilldown(suspect: str, run_id: str) -> Drilldown:
    """The query and notebook section for ``suspect`` of run ``run_id``; a suspect without its
    own query gets the run's step series."""
    rid = sql_literal(run_id)
    if suspect in _BY_NAME:
        query, notebook = _BY_NAME[suspect]
        return Drilldown(query.format(rid=rid), notebook)
    for prefix, query in _BY_PREFIX.items():
        if suspect.startswith(prefix):
            key = suspect.removeprefix(prefix)
            a, _, b = key.partition("->")
            sql = query.format(rid=rid, a=sql_literal(a), b=sql_literal(b))
            return Drilldown(sql, _SUSPECTS)
    return Drilldown(f"SELECT * FROM steps WHERE run_id = {rid} ORDER BY step", _SUSPECTS)
