"""Multi-process behaviour: live readers, kill -9, two ranks, SIGTERM/SIGINT (subprocesses)."""

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from observability import open_run
from observability.parts import FANIN, list_parts
from observability.verify import verify

REPO = Path(__file__).resolve().parents[2]


def spawn(module, *args):
    return subprocess.Popen(
        [sys.executable, "-m", f"tests.observability.{module}", *map(str, args)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def read_until(proc, prefix, at_least):
    """Read stdout lines until ``prefix N`` with N >= at_least; returns N."""
    for line in proc.stdout:
        if line.startswith(prefix) and int(line.split()[1]) >= at_least:
            return int(line.split()[1])
    raise AssertionError(f"writer ended early: {proc.stderr.read()}")


def quiet_open(run):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return open_run(run)


def test_reader_process_sees_every_flush_with_no_errors_and_no_partial_rows(tmp_path):
    """A reader polling a live run sees each flush (and the live merges) once: counts only grow,
    by whole batches, with no error. The writer waits for the reader to report each flush before
    writing the next (a handshake, not a timing)."""
    run, steps, rows, every = tmp_path / "run", 40, 500, 2
    progress = tmp_path / "progress"
    reader = spawn("proc_reader", run, "--expect", steps * rows, "--progress", progress,
                   "--timeout", 120)  # fmt: skip
    writer = spawn("proc_writer", run, "--steps", steps, "--rows", rows, "--flush-seconds", 60,
                   "--durable-every", every, "--await-reader", progress, "--sleep", 0)  # fmt: skip
    out, err = reader.communicate(timeout=180)
    assert writer.wait(timeout=180) == 0, writer.stderr.read()
    result = json.loads(out)
    assert result["errors"] == [], err
    counts = result["counts"]
    assert counts == sorted(counts) and counts[-1] == steps * rows
    assert all(c % rows == 0 for c in counts)  # whole batches: no partial rows, none twice
    assert set(range(every * rows, steps * rows + 1, every * rows)) <= set(counts)
    assert len(list_parts(run, "tokens", covered=True)) >= FANIN  # merged while it was read


def test_kill_9_loses_at_most_the_unflushed_interval(tmp_path):
    run, rows = tmp_path / "run", 500
    writer = spawn("proc_writer", run, "--rows", rows, "--durable-every", 4, "--sleep", 0.005)
    durable = read_until(writer, "durable", 8 * rows)
    writer.send_signal(signal.SIGKILL)
    tail = writer.communicate(timeout=30)[0].split()
    durable = max([durable] + [int(x) for x in tail if x.isdigit()])
    assert writer.returncode == -signal.SIGKILL
    con = quiet_open(run)  # every committed part readable, no warnings
    (n,) = con.execute("SELECT count(*) FROM tokens").fetchall()[0]
    assert n >= durable and n % rows == 0  # whole batches only, nothing durable lost
    assert con.execute("SELECT status FROM runs").fetchall() == [("running",)]  # never closed
    assert verify(run).ok


def test_two_ranks_write_one_run(tmp_path):
    run, steps, rows = tmp_path / "run", 10, 300
    procs = [
        spawn("proc_writer", run, "--rank", r, "--world-size", 2, "--steps", steps, "--rows", rows)
        for r in (0, 1)
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()
    con = quiet_open(run)
    assert con.execute("SELECT count(*), count(DISTINCT sample_id) FROM tokens").fetchall() == [
        (2 * steps * rows, 2 * steps * rows)
    ]
    per_rank = con.execute(
        "SELECT rank, count(*) FROM steps GROUP BY rank ORDER BY rank"
    ).fetchall()
    assert per_rank == [(0, steps), (1, steps)]
    assert con.execute("SELECT status, world_size FROM runs").fetchall() == [("finished", 2)]
    names = [p.name for p in list_parts(run, "tokens")]
    assert {n[:10] for n in names} == {"part-r0000", "part-r0001"} and len(set(names)) == len(names)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_flushes_and_marks_failed(tmp_path, sig):
    run, rows = tmp_path / "run", 200
    # No timer (60 s), no step-end flushes: only the signal handler can put tokens on disk.
    writer = spawn("proc_writer", run, "--rows", rows, "--signals", "--report-emitted",
                   "--no-step-end", "--flush-seconds", 60)  # fmt: skip
    emitted = read_until(writer, "emitted", 3 * rows)
    os.kill(writer.pid, sig)
    writer.communicate(timeout=30)
    assert writer.returncode == -sig  # the default behaviour of the signal still happens
    con = quiet_open(run)
    assert con.execute("SELECT status FROM runs").fetchall() == [("failed",)]
    (n, steps) = con.execute("SELECT count(*), count(DISTINCT step) FROM tokens").fetchall()[0]
    assert n >= emitted and n == steps * rows  # everything emitted before the signal, whole steps
    (step_rows,) = con.execute("SELECT count(*) FROM steps").fetchall()[0]
    assert step_rows in (steps - 1, steps)  # the signal may land between the two emits of a step
