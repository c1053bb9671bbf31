"""Every dashboard page over runs imported from slime, NeMo-RL and prime-rl dumps: no page
fails on the columns a dump lacks, and the Token view shows the ids of a foreign tokenizer."""

from __future__ import annotations

import pytest

from observability.importers import import_dump
from tests.dashboards.apptest import PAGES, run_page
from tests.observability.importers.episodes import make_steps
from tests.observability.importers.nemo_writer import write_log
from tests.observability.importers.prime_writer import write_export
from tests.observability.importers.slime_writer import write_dump

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("imported")
    runs = root / "runs"
    import_dump("slime", write_dump(root / "s", make_steps()), runs, run_id="slime")
    import_dump("nemo-rl", write_log(root / "n", make_steps()), runs, run_id="nemo")
    import_dump("prime-rl", write_export(root / "p", make_steps()), runs, run_id="prime")
    return runs


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_renders_imported_runs(page, runs, monkeypatch):
    at = run_page(monkeypatch, runs, ["slime", "nemo", "prime"], page)
    assert not at.exception, [e.value for e in at.exception]


def test_token_view_shows_foreign_ids_and_missing_values(runs, monkeypatch):
    at = run_page(monkeypatch, runs, ["nemo"], "Token view")
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["staleness"] == "–" and metrics["advantage"] == "–"
    html = "".join(m.value for m in at.markdown)
    assert "⟨" in html  # ids, not closedloop's decoding of another vocabulary
