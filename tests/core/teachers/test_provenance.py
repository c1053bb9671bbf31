"""Teacher provenance (``core.teachers.provenance``): domains, lineage source and config hash of
checkpoints, resolved through recorded base models; the per-route columns a run records."""

from __future__ import annotations

import hashlib
import json

from core.config import load_config
from core.teachers.provenance import (
    checkpoint_domains,
    checkpoint_provenance,
    config_sha256,
    route_provenance,
    source_sha256,
)


def _write(path, meta):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(meta))
    return path


def test_domains_from_the_record_or_the_task_ops():
    assert checkpoint_domains({"domains": ["subtraction", "addition"]}) == [
        "addition",
        "subtraction",
    ]
    assert checkpoint_domains({"task": {"ops": ["+"]}}) == ["addition"]
    assert checkpoint_domains({"task": {"ops": ["-", "+", "-"]}}) == ["addition", "subtraction"]
    assert checkpoint_domains({"task": {"ops": ["*"]}}) is None  # not an arithmetic domain
    assert checkpoint_domains({}) is None


def test_source_follows_the_lineage_to_its_first_weights(tmp_path):
    sft = _write(tmp_path / "sft", {"produced_by": "closedloop pretrain", "weights_sha256": "aaa"})
    rl = _write(tmp_path / "rl", {"base_model": str(sft), "weights_sha256": "bbb"})
    rl2 = {"base_model": "rl", "weights_sha256": "ccc"}  # relative to the repo root
    assert source_sha256({"weights_sha256": "aaa"}, repo_root=tmp_path) == "aaa"
    assert (
        source_sha256({"base_model": str(rl), "weights_sha256": "x"}, repo_root=tmp_path) == "aaa"
    )
    assert source_sha256(rl2, repo_root=tmp_path) == "aaa"
    assert source_sha256({"source_sha256": "zzz", "base_model": "rl"}, repo_root=tmp_path) == "zzz"
    assert source_sha256({"base_model": "missing"}, repo_root=tmp_path) is None


def test_config_hash_recorded_or_of_the_metadata():
    assert config_sha256({"config_sha256": "abc", "seed": 1}) == "abc"
    # without one: sha256 of the sorted JSON of everything but the weights' hash
    want = hashlib.sha256(json.dumps({"seed": 1}, sort_keys=True).encode()).hexdigest()
    assert config_sha256({"seed": 1, "weights_sha256": "w"}) == want


def test_train_checkpoint_and_route_columns(tmp_path):
    cfg = load_config("configs/expert_addition.toml")
    base = {"produced_by": "closedloop pretrain", "weights_sha256": "sft"}
    prov = checkpoint_provenance(cfg, base, repo_root=tmp_path)
    want = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()
    assert prov == {"domains": ["addition"], "source_sha256": "sft", "config_sha256": want}
    routes = {"addition": "a@1", "*": "o@2"}
    teachers = {"a@1": {**prov, "weights_sha256": "e"}, "o@2": {"weights_sha256": "other"}}
    cols = route_provenance(routes, teachers, base, {"*": "off"}, repo_root=tmp_path)
    assert cols["addition"] == {
        "teacher_domains": ["addition"],
        "teacher_source_sha256": "sft",
        "teacher_config_sha256": want,
        "student_source_sha256": "sft",
        "declared_source": "off",  # the "*" declaration covers every domain without its own
    }
    assert cols["*"]["teacher_source_sha256"] == "other" and cols["*"]["teacher_domains"] is None
    assert (
        route_provenance(routes, teachers, base, {}, repo_root=tmp_path)["*"]["declared_source"]
        == "same"
    )
