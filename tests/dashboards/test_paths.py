"""Run resolution: only run directories directly under the runs root are ever opened."""

from __future__ import annotations

import os

import pytest

from dashboards.paths import PathRefused, list_runs, resolve_run, split_targets


@pytest.fixture()
def root(tmp_path):
    for name in ("run-a", "run-b"):
        (tmp_path / "runs" / name / "telemetry").mkdir(parents=True)
    (tmp_path / "runs" / "notes").mkdir()  # a directory that is no run
    (tmp_path / "outside" / "telemetry").mkdir(parents=True)  # a run outside the root
    return tmp_path / "runs"


def test_resolve_inside(root):
    ref = resolve_run(root, "run-a")
    assert ref.name == "run-a" and ref.path == (root / "run-a").resolve()
    assert resolve_run(root, str(root / "run-b")).name == "run-b"  # absolute path inside: fine


@pytest.mark.parametrize(
    "name",
    [
        "../outside",
        "run-a/../../outside",
        "/etc",
        "..",
        ".",
        "",
        "run-a/telemetry",
        "notes",
        "missing",
        "run-a\x00",
    ],
)
def test_resolve_refuses(root, name):
    with pytest.raises(PathRefused):
        resolve_run(root, name)


def test_symlink_out_of_root_refused(root):
    os.symlink(root.parent / "outside", root / "sneaky")
    with pytest.raises(PathRefused, match="outside the runs root"):
        resolve_run(root, "sneaky")
    assert "sneaky" not in list_runs(root)  # not even offered in the sidebar


def test_list_runs_newest_name_first(root):
    assert list_runs(root) == ["run-b", "run-a"]
    assert list_runs(root / "missing") == []


def test_split_targets(root):
    assert split_targets([str(root)]) == (root.resolve(), [])
    assert split_targets([str(root / "run-a"), str(root / "run-b")]) == (
        root.resolve(),
        ["run-a", "run-b"],
    )
    with pytest.raises(PathRefused, match="share one parent"):
        split_targets([str(root / "run-a"), str(root.parent / "outside")])
    with pytest.raises(PathRefused, match="not telemetry runs"):
        split_targets([str(root / "run-a"), str(root / "notes")])
    assert split_targets([str(root / "later")]) == ((root / "later").resolve(), [])  # not yet
    (root / "file").write_text("x")
    with pytest.raises(PathRefused, match="neither"):
        split_targets([str(root / "file")])
