"""On-disk layout of a run's telemetry and the atomic Parquet part files it is made of.

Layout: ``RUN_DIR/telemetry/<table>/part-r<rank>-<writer>-<seq>.parquet`` (immutable once
visible), ``RUN_DIR/telemetry/manifest.json`` and ``RUN_DIR/telemetry.duckdb`` (compaction).
A part is written under a hidden ``.tmp`` name through a 1 MiB buffer (a small part in one write
call), fsynced, renamed into place and the directory fsynced, so readers see whole files or
nothing. ``<writer>`` is unique per writer object (pid + random), so ranks, processes and
restarts never collide. Files: LZ4 and no dictionaries below ``SMALL_PART_ROWS`` rows, zstd and
dictionaries for the schema's low-cardinality columns above, min/max statistics only for integer
and time columns.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from observability.schema import TABLES, TableSpec

TELEMETRY_DIR = "telemetry"
DB_NAME = "telemetry.duckdb"
MANIFEST_NAME = "manifest.json"
PART_GLOB = "part-*.parquet"
COMPRESSION = "zstd"
SMALL_COMPRESSION = "lz4"
WRITE_BUFFER_BYTES = 1 << 20
"""Parts reach their file through a buffer this large: the loop's parts (tens of KB) in one
write call instead of one per column chunk (~0.1 ms less CPU each), large parts in 1 MiB
writes."""
SMALL_PART_ROWS = 65_536
"""Parts with fewer rows — the training loop's flushes every ~2 s — are LZ4 (Parquet
``LZ4_RAW``): on a flush of the tiny loop's tables it writes 14% faster than the zstd /
uncompressed mix it replaced, with files as small as zstd's for ``tokens``. Larger parts (GLM-
scale steps, the ingest benchmark) are zstd, whose better ratio matters there and whose set-up
cost does not (``benchmarks/README.md``). Small parts are also written without dictionary
encoding: on the loop's flush tables dictionaries cost 13% more encoding time for 11% smaller
files (compaction re-encodes the rows anyway); large parts dictionary-encode the schema's
low-cardinality columns, which doubles their write speed."""


def telemetry_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / TELEMETRY_DIR


def resolve_run_dir(path: str | os.PathLike) -> Path:
    """Accept a run directory, its ``telemetry/`` folder or its ``telemetry.duckdb``."""
    p = Path(path)
    if p.name == DB_NAME or (p.name == TELEMETRY_DIR and p.is_dir()):
        return p.parent
    return p


def parquet_options(spec: TableSpec, num_rows: int | None = None) -> dict:
    """``pq.write_table`` keyword arguments shared by the writer and the benchmark (a part of
    ``num_rows`` rows; None: a large one)."""
    small = num_rows is not None and num_rows < SMALL_PART_ROWS
    return {
        "compression": SMALL_COMPRESSION if small else COMPRESSION,
        "use_dictionary": False if small else spec.dictionary_columns,
        "write_statistics": spec.statistics_columns,
    }


def fsync_dir(path: Path) -> None:
    """fsync a directory (or file) by path (a read-only descriptor suffices on POSIX)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a hidden tmp file, fsync and rename."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class PartWriter:
    """Writes the part files of one writer (one rank of one process) into a run directory."""

    def __init__(self, run_dir: str | os.PathLike, *, rank: int) -> None:
        self.root = telemetry_dir(run_dir)
        self.rank = rank
        self.writer_id = f"{os.getpid()}{uuid.uuid4().hex[:6]}"
        self._seq = 0
        self._lock = threading.Lock()
        for name in TABLES:
            (self.root / name).mkdir(parents=True, exist_ok=True)

    def write(self, table: pa.Table, spec: TableSpec) -> Path:
        """Atomically write ``table`` as a new part of ``spec.name``; returns its final path."""
        with self._lock:
            self._seq += 1
            seq = self._seq
        name = f"part-r{self.rank:04d}-{self.writer_id}-{seq:07d}.parquet"
        final = self.root / spec.name / name
        tmp = final.with_name(f".{name}.tmp")
        raw = pa.OSFile(str(tmp), "wb")
        try:  # buffered: a small part reaches the file in one write call, a large one in 1 MiB
            with pa.BufferedOutputStream(raw, buffer_size=WRITE_BUFFER_BYTES) as out:
                pq.write_table(table, out, **parquet_options(spec, table.num_rows))  # no GIL
                out.flush()
                os.fsync(raw.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed write (disk full): leave no tmp file behind
            raise
        finally:
            raw.close()
        os.replace(tmp, final)
        fsync_dir(final.parent)
        return final


def list_parts(run_dir: str | os.PathLike, table: str) -> list[Path]:
    """Committed parts of ``table`` (never tmp files), sorted by name."""
    d = telemetry_dir(run_dir) / table
    if not d.is_dir():
        return []
    return sorted(d.glob(PART_GLOB))


def last_write_time(run_dir: str | os.PathLike) -> float | None:
    """Epoch seconds of the run's newest part (``contract_results``, which the gate appends to,
    left out), or None when nothing was written."""
    paths = [
        p for table in TABLES if table != "contract_results" for p in list_parts(run_dir, table)
    ]
    times = []
    for p in paths:
        try:
            times.append(p.stat().st_mtime)
        except OSError:
            pass
    return max(times, default=None)


def part_key(path: Path) -> str:
    """How manifests name a part: ``<table>/<file name>``."""
    return f"{path.parent.name}/{path.name}"


@dataclass(frozen=True)
class PartStatus:
    path: Path
    rows: int | None
    """Row count from the footer; None when the part is corrupt."""
    error: str | None


_FOOTER_CACHE: dict[tuple[str, int, int], PartStatus] = {}


def check_part(path: Path, *, full: bool = False) -> PartStatus:
    """Read the footer (``full``: decode every page) of a part; cached by path, size and mtime."""
    try:
        st = path.stat()
    except OSError as e:
        return PartStatus(path, None, str(e))
    key = (str(path), st.st_size, st.st_mtime_ns)
    if not full and key in _FOOTER_CACHE:
        return _FOOTER_CACHE[key]
    try:
        if full:
            rows = pq.read_table(path).num_rows
        else:
            rows = pq.read_metadata(path).num_rows
        status = PartStatus(path, rows, None)
    except (OSError, pa.ArrowException) as e:
        status = PartStatus(path, None, f"{type(e).__name__}: {e}")
    if not full:
        _FOOTER_CACHE[key] = status
    return status
