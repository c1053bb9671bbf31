"""The importer registry and the CLI surface; readers, gate and dashboard store stay torch-free
(slime's reader imports torch only when it loads a file)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from closedloop.cli import build_parser
from observability.importers import IMPORTERS, DumpError, import_dump, reader


def test_registry_lists_frameworks_and_pins_commits():
    assert list(IMPORTERS) == ["slime", "nemo-rl", "prime-rl"]
    for name in IMPORTERS:
        module = reader(name)
        assert len(module.SOURCE_COMMIT) == 40 and module.SOURCE_COMMIT in module.__doc__
    with pytest.raises(ValueError, match=r"unknown framework 'verl'; importers: \['slime'"):
        reader("verl")


def test_cli_surface_and_missing_source(tmp_path):
    args = build_parser().parse_args(["import", "prime-rl", "out", "--run-dir", "r"])
    assert (args.framework, args.src, args.run_dir, args.run_id, args.vocab_size) == (
        "prime-rl",
        "out",
        "r",
        None,
        None,
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["import", "verl", "out"])
    with pytest.raises(DumpError, match="no such file or directory"):
        import_dump("slime", tmp_path / "absent", tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_readers_and_gate_import_without_torch():
    code = (
        "import sys; import observability.cli, observability.importers.slime, "
        "observability.importers.nemo_rl, observability.importers.prime_rl, contracts.gate, "
        "dashboards.store; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
