"""``install_signal_handlers``: on SIGTERM/SIGINT flush telemetry, mark the run failed, then die as usual.

After closing the sink the previous handler is restored and the signal re-delivered (default:
the process terminates with that signal; Python's SIGINT handler raises KeyboardInterrupt).
Simplification: main thread only (a Python restriction on installing handlers).
"""

from __future__ import annotations

import os
import signal
import warnings
from typing import Any

from observability.telemetry import Telemetry


def install_signal_handlers(
    telemetry: Telemetry, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
) -> None:
    """Make ``signals`` close ``telemetry`` with status ``failed`` before their usual effect."""
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def handler(signum: int, frame: Any) -> None:
        try:
            telemetry.close("failed")
        except Exception as e:  # the run is ending anyway; say what was lost
            warnings.warn(f"telemetry close on signal {signum} failed: {e}", stacklevel=2)
        prev = previous[signum]
        signal.signal(signum, prev if prev is not None else signal.SIG_DFL)
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            os.kill(os.getpid(), signum)

    for sig in signals:
        signal.signal(sig, handler)
