"""``topk`` / ``moe_routes`` rows: hand-checked rows of a hand-made step, validated by the real
telemetry schema, and an end-to-end 2-step DSA + MoE run that writes both tables."""

import numpy as np
import pytest
import torch

from core.model.dsa_select import index_hash
from core.telemetry.sparse import route_rows, topk_rows
from observability.records import build_table
from tests.core.telemetry.sparse_cases import hand_step

IDS = torch.tensor([10, 11])
KEEP = np.array([True, False])  # sample 10 keeps its lists, sample 11 only hashes / ties


def test_topk_rows_golden():
    cols = topk_rows(step=3, sample_ids=IDS, sparse=hand_step(), keep=KEEP)
    # 4 action queries x 2 layers x 2 engines; order engine, layer, sample, slot
    assert len(cols["pos"]) == 16
    # per (engine, layer): sample 10 at slots 1, 2 (offset 0); sample 11 at slots 2, 3 (offset 1)
    assert cols["sample_id"][:4].tolist() == [10, 10, 11, 11]
    assert cols["pos"][:4].tolist() == [1, 2, 1, 2]
    assert cols["layer"].tolist() == [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4
    assert cols["engine"].tolist() == [0] * 8 + [1] * 8  # train, then rollout
    rows = [list(r.compressed()) for r in cols["indices"][:4]]  # masked entries leave the list
    assert rows == [[0, 1], [1, 2], [], []]  # lists only when kept
    # the hash sees every row: train (1, 3) = {0, 2} vs rollout {1, 2}
    h = cols["index_hash"]
    assert h[3] == int(index_hash(torch.tensor([0, 2]), torch.tensor([True, True])))
    assert h[3] != h[11] and (h[:3] == h[8:11]).all() and (h[4:8] == h[12:16]).all()
    table = build_table("topk", cols, run_id="r", rank=0)  # the schema accepts the rows
    assert table.num_rows == 16


def test_route_rows_golden():
    cols = route_rows(step=3, sample_ids=IDS, sparse=hand_step(), keep=KEEP)
    # kept sample 10 only: slots 1, 2 of the one MoE layer, train then rollout
    assert cols["sample_id"].tolist() == [10] * 4 and cols["pos"].tolist() == [1, 2, 1, 2]
    assert cols["engine"].tolist() == [0, 0, 1, 1] and cols["layer"].tolist() == [1] * 4
    assert cols["experts"].tolist() == [[0, 1], [2, 3], [1, 0], [2, 3]]
    assert build_table("moe_routes", cols, run_id="r", rank=0).num_rows == 4


@pytest.mark.slow
def test_dsa_moe_run_writes_topk_and_route_rows(tmp_path):
    from observability import open_run
    from tests.conftest import make_run

    run = make_run(
        tmp_path,
        ["train.steps=2", "model.dsa_topk=8", "model.moe_layers=[1]", "train.routing_replay=true"],
        name="dsa",
    )
    con = open_run(run)
    steps = con.execute("SELECT step, topk_agreement, route_agreement FROM steps ORDER BY step")
    assert steps.fetchall() == [(0, 1.0, 1.0), (1, 1.0, 1.0)]
    rows = con.execute(
        "SELECT engine, count(DISTINCT layer), count(*), max(len(indices)), min(len(indices)) "
        "FROM topk GROUP BY engine ORDER BY engine"
    ).fetchall()
    assert [r[:2] for r in rows] == [("rollout", 4), ("train", 4)] and rows[0][2] == rows[1][2]
    assert all(r[3] == 8 and r[4] >= 1 for r in rows)
    routes = con.execute("SELECT engine, layer, count(*) FROM moe_routes GROUP BY ALL ORDER BY ALL")
    n = routes.fetchall()
    assert [r[:2] for r in n] == [("rollout", 1), ("train", 1)] and n[0][2] == n[1][2] > 0
    # each recorded query's row is joinable with the action token it predicts (pos + 1)
    orphan = con.execute(
        "SELECT count(*) FROM topk t ANTI JOIN tokens k ON k.sample_id = t.sample_id "
        "AND k.pos = t.pos + 1 AND k.role = 'action'"
    ).fetchall()[0][0]
    assert orphan == 0
