"""The driver closes any store as ``failed`` on SIGTERM/SIGINT, mirrored or not
(``--telemetry duckdb`` and ``duckdb,tensorboard`` alike), and installs nothing for ``none``.

In-process: a Python handler stands in as "the previous handler", so the re-delivered signal
reaches it instead of ending pytest; ``signal.raise_signal`` runs the handler synchronously."""

from __future__ import annotations

import signal

import pytest

from core.config import load_config
from core.driver import open_sink
from core.run import new_run_dir
from core.tokenizer.tokenizer import Tokenizer
from observability import open_run
from tests.conftest import TINY


@pytest.fixture
def previous_handlers():
    """SIGTERM/SIGINT record what reaches them; the real handlers come back afterwards."""
    got: list[int] = []
    saved = {
        s: signal.signal(s, lambda n, f: got.append(n)) for s in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield got
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


@pytest.mark.parametrize("kind", ["duckdb", "duckdb,tensorboard"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_closes_any_store_as_failed(tmp_path, previous_handlers, kind, sig):
    cfg = load_config(None, list(TINY))
    run = new_run_dir(tmp_path)
    sink = open_sink(kind, run, cfg, tok=Tokenizer.load())
    sink.emit("steps", {"step": 0, "policy_version": 1, "loss": 0.5})
    signal.raise_signal(sig)
    assert previous_handlers == [sig]  # the signal's usual effect still happens afterwards
    con = open_run(run)
    assert con.execute("SELECT status FROM runs").fetchall() == [("failed",)]
    assert con.execute("SELECT step, loss FROM steps").fetchall() == [(0, 0.5)]
    if "tensorboard" in kind:  # the mirror was closed with the store: its event file is whole
        from tests.observability.test_mirror import read_scalars

        assert read_scalars(run / "tensorboard")["steps/loss"] == [(0, 0.5)]


def test_no_store_no_handlers(tmp_path, previous_handlers):
    before = signal.getsignal(signal.SIGTERM)
    open_sink("none", new_run_dir(tmp_path), load_config(None, list(TINY)), tok=Tokenizer.load())
    assert signal.getsignal(signal.SIGTERM) is before
