"""benchmarks/stats.py: summaries and paired intervals against hand-derived values."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "stats.py"
_SPEC = importlib.util.spec_from_file_location("bench_stats", _PATH)
stats = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = stats  # dataclasses look their module up
_SPEC.loader.exec_module(stats)


def test_summary_hand_derived():
    # mean 0.62; deviations ±0.02, 0 -> variance 0.0008/2 = 0.0004, sd 0.02.
    s = stats.summary([0.60, 0.64, 0.62])
    assert s.n == 3 and s.mean == pytest.approx(0.62) and s.sd == pytest.approx(0.02)
    # half width t_{0.975,2} * sd / sqrt(3) = 4.303 * 0.02 / 1.7320508 = 0.049687
    assert s.half_width == pytest.approx(0.049687, abs=1e-6)
    assert (s.lo, s.hi) == (0.60, 0.64)
    assert s.fmt(2, 100) == "62.00 ± 2.00 (60.00–64.00, n=3)"


def test_paired_tie_and_lead():
    # differences 0.1, 0.1, 0.0: mean 0.0667, sd 0.0577, half 4.303*0.0577/1.732 = 0.1434 -> spans 0
    tie = stats.paired([0.7, 0.8, 0.9], [0.6, 0.7, 0.9])
    assert tie.verdict("A", "B") == "tie"
    assert tie.t == pytest.approx(0.0666667 / (0.0577350 / math.sqrt(3)), rel=1e-5)
    lead = stats.paired([0.9, 0.91, 0.92, 0.9], [0.5, 0.52, 0.5, 0.51])
    assert lead.verdict("A", "B") == "A ahead"
    assert stats.paired([0.1, 0.2, 0.15], [0.5, 0.7, 0.6]).verdict("A", "B") == "B ahead"
    # two seeds at -0.4, -0.5: t_{0.975,1} = 12.706 makes the interval span 0
    assert stats.paired([0.1, 0.2], [0.5, 0.7]).verdict("A", "B") == "tie"
    assert "tie" in tie.fmt("A", "B")


def test_bad_input_named():
    with pytest.raises(ValueError, match="equal seeds"):
        stats.paired([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least one"):
        stats.summary([])
    with pytest.raises(ValueError, match="df"):
        stats.t975(0)


def test_best_of_sweep_picks_highest_mean():
    lr, s = stats.best_of_sweep({1e-5: [0.5, 0.6], 3e-5: [0.7, 0.7], 1e-4: [0.9, 0.4]})
    assert lr == 3e-5 and s.mean == pytest.approx(0.7)
