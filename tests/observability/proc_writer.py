"""A telemetry-writing process for the multi-process tests (run with ``python -m``)."""

import argparse
import time
from pathlib import Path

import numpy as np

from observability import DuckDBTelemetry, TelemetryConfig
from observability.signals import install_signal_handlers


def wait_for_reader(progress: Path, rows: int, timeout: float = 60.0) -> None:
    """Block until the reader process reports a count of at least ``rows`` (a handshake)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if int(progress.read_text()) >= rows:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    raise TimeoutError(f"the reader never reported {rows} rows")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--steps", type=int, default=-1, help="-1: until killed")
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--flush-seconds", type=float, default=0.05)
    p.add_argument("--sleep", type=float, default=0.01)
    p.add_argument("--durable-every", type=int, default=0)
    p.add_argument("--await-reader", default=None, help="after each durable flush, wait until "
                   "this file (written by proc_reader --progress) holds the durable count")  # fmt: skip
    p.add_argument("--signals", action="store_true")
    p.add_argument("--no-step-end", action="store_true", help="never flush at step end")
    p.add_argument("--report-emitted", action="store_true", help="print 'emitted N' per step")
    a = p.parse_args()
    config = TelemetryConfig(flush_seconds=a.flush_seconds, compact_on_close=False)
    tel = DuckDBTelemetry(a.run_dir, run_id="shared", rank=a.rank, world_size=a.world_size,
                          run_info={"vocab_size": 1000}, config=config)  # fmt: skip
    if a.signals:
        install_signal_handlers(tel)
    print("ready", flush=True)
    step = 0
    while step != a.steps:
        ids = a.rank * 10**9 + step * a.rows + np.arange(a.rows)
        tel.emit("tokens", {"step": step, "sample_id": ids, "pos": 0, "token_id": ids % 1000,
                            "role": "action", "loss_mask": True,
                            "rollout_logp": -np.random.rand(a.rows)})  # fmt: skip
        tel.emit("steps", {"step": step, "policy_version": step, "loss": 0.1})
        if not a.no_step_end:
            tel.step_end(step)
        step += 1
        if a.report_emitted:
            print(f"emitted {step * a.rows}", flush=True)
        if a.durable_every and step % a.durable_every == 0:
            tel.flush()
            print(f"durable {step * a.rows}", flush=True)
            if a.await_reader:
                wait_for_reader(Path(a.await_reader), step * a.rows)
        time.sleep(a.sleep)
    tel.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
