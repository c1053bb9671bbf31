"""On-disk layout of a run's telemetry: atomic Parquet parts, merged while the run trains.

Layout: ``RUN_DIR/telemetry/<table>/part-r<rank>-<writer>-<seq>.parquet``, where ``<writer>`` is
unique per writer object (pid + random: ranks, processes and restarts never collide) and
``<seq>`` counts its parts; ``RUN_DIR/telemetry/manifest.json`` and ``RUN_DIR/telemetry.duckdb``
come from compaction (``observability.compact``). A part is written under a hidden ``.tmp`` name,
fsynced, renamed into place and the directory fsynced, so readers see whole files or nothing.

Live merge (``Merger``): a writer joins its own small parts of a table into one part named
``part-r<rank>-<writer>-<first>-<last>.parquet``, which *covers* that writer's parts with ``seq``
in ``[first, last]``. ``list_parts`` hides covered parts, so a listing shows each row once
whether it was taken before, during or after the rename; covered parts are deleted only
``PRUNE_AFTER_S`` after their cover appeared (``prune``), so a reader's snapshot stays readable
that long. Merges are tiered: ``FANIN`` parts of one level make one part of the next, up to
``max_rows`` rows, so a run of N flushes leaves O(FANIN log N) parts per table.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from observability.schema import TABLES, TableSpec, table_spec

TELEMETRY_DIR = "telemetry"
DB_NAME = "telemetry.duckdb"
MANIFEST_NAME = "manifest.json"
SMALL_PART_ROWS = 65_536
"""Parts below this are LZ4 without dictionaries (cheap to write, a flush every few seconds);
larger ones zstd with dictionaries for the schema's low-cardinality columns."""
FANIN = 8
"""Parts of one level joined into one part of the next."""
PRUNE_AFTER_S = 300.0
"""Covered parts are deleted this long after their cover appeared: how long a reader's snapshot
(``open_run`` / ``refresh``) of a live run stays readable."""


def telemetry_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / TELEMETRY_DIR


def resolve_run_dir(path: str | os.PathLike) -> Path:
    """Accept a run directory, its ``telemetry/`` folder or its ``telemetry.duckdb``."""
    p = Path(path)
    if p.name == DB_NAME or (p.name == TELEMETRY_DIR and p.is_dir()):
        return p.parent
    return p


def parquet_options(spec: TableSpec, num_rows: int | None = None) -> dict:
    """``pq.write_table`` keyword arguments for a part of ``num_rows`` rows (None: a large one);
    min/max statistics only for the integer and time columns readers filter on."""
    small = num_rows is not None and num_rows < SMALL_PART_ROWS
    return {
        "compression": "lz4" if small else "zstd",
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

    def write(
        self,
        table: pa.Table,
        spec: TableSpec,
        *,
        covers: tuple[int, int] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> tuple[Path, int] | None:
        """Atomically write ``table`` as a new part of ``spec.name`` (``covers``: the seq range of
        this writer's parts it merges); returns its path and seq (its first covered seq). With
        ``ready``, the written file is committed only if ``ready()`` holds (else None)."""
        if covers is None:
            with self._lock:
                self._seq += 1
                seq = self._seq
            name = f"part-r{self.rank:04d}-{self.writer_id}-{seq:07d}.parquet"
        else:
            seq = covers[0]
            name = f"part-r{self.rank:04d}-{self.writer_id}-{covers[0]:07d}-{covers[1]:07d}.parquet"
        final = self.root / spec.name / name
        tmp = final.with_name(f".{name}.tmp")
        raw = pa.OSFile(str(tmp), "wb")
        try:  # buffered: a small part reaches the file in one write call, without the GIL
            with pa.BufferedOutputStream(raw, buffer_size=1 << 20) as out:
                _write_parquet(table, out, spec)
                out.flush()
                os.fsync(raw.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed write (disk full): leave no tmp file behind
            raise
        finally:
            raw.close()
        if ready is not None and not ready():
            tmp.unlink()
            return None
        os.replace(tmp, final)
        fsync_dir(final.parent)
        return final, seq


def _write_parquet(table: pa.Table, out: pa.NativeFile, spec: TableSpec) -> None:
    """Parquet with the Parquet types only (no stored Arrow schema): a dictionary-encoded string
    column reads back as a plain string; the schema's metadata goes into the footer."""
    options = parquet_options(spec, table.num_rows)
    with pq.ParquetWriter(out, table.schema, store_schema=False, **options) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata(spec.arrow_schema.metadata)


@lru_cache(maxsize=1 << 16)
def _cover(name: str) -> tuple[str, int, int] | None:
    """(writer, first seq, last seq) of a part's file name, or None for another name."""
    fields = name.removesuffix(".parquet").split("-")  # part, r<rank>, <writer>, <seq>[, <last>]
    if len(fields) not in (4, 5) or not all(f.isdigit() for f in fields[3:]):
        return None
    return f"{fields[1]}-{fields[2]}", int(fields[3]), int(fields[-1])


def _split(names: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(visible parts, [(covered part, its cover)]) of one table directory's part names."""
    by_writer: dict[str, list[tuple[int, int, str]]] = {}
    visible = []
    for name in names:
        c = _cover(name)
        if c is None:
            visible.append(name)
        else:
            by_writer.setdefault(c[0], []).append((c[1], -c[2], name))
    covered = []
    for parts in by_writer.values():
        reach, cover = -1, ""
        for _, neg_last, name in sorted(parts):
            if -neg_last <= reach:
                covered.append((name, cover))
            else:
                visible.append(name)
                reach, cover = -neg_last, name
    return sorted(visible), covered


def _listing(run_dir: str | os.PathLike, table: str) -> tuple[Path, list[str], list[tuple]]:
    """(the table's folder, visible part names, [(covered name, its cover's name)])."""
    d = telemetry_dir(run_dir) / table
    try:
        names = [n for n in os.listdir(d) if n.startswith("part-") and n.endswith(".parquet")]
    except (FileNotFoundError, NotADirectoryError):
        return d, [], []
    return d, *_split(names)


def list_parts(run_dir: str | os.PathLike, table: str, *, covered: bool = False) -> list[Path]:
    """Visible committed parts of ``table`` (no tmp files, no parts a merged part covers),
    sorted by name; ``covered``: the covered ones instead (hidden, not yet pruned)."""
    d, visible, hidden = _listing(run_dir, table)
    return sorted(d / n for n, _ in hidden) if covered else [d / n for n in visible]


def prune(run_dir: str | os.PathLike, *, older_than: float = PRUNE_AFTER_S) -> int:
    """Delete covered parts whose cover is at least ``older_than`` seconds old; returns how many."""
    now, n = time.time(), 0
    for table in TABLES:
        d, _, hidden = _listing(run_dir, table)
        for part, cover in hidden:
            try:
                if now - (d / cover).stat().st_mtime >= older_than:
                    (d / part).unlink()
                    n += 1
            except FileNotFoundError:
                pass
    return n


def part_key(path: Path) -> str:
    """How manifests name a part: ``<table>/<file name>``."""
    return f"{path.parent.name}/{path.name}"


def last_write_time(run_dir: str | os.PathLike) -> float | None:
    """Epoch seconds of the run's newest part (``contract_results``, which the gate appends to,
    left out), or None when nothing was written."""
    times = []
    for table in TABLES:
        for p in list_parts(run_dir, table) if table != "contract_results" else []:
            try:
                times.append(p.stat().st_mtime)
            except OSError:
                pass
    return max(times, default=None)


@dataclass(frozen=True)
class PartStatus:
    path: Path
    rows: int | None
    """Row count from the footer; None when the part is corrupt."""
    error: str | None
    schema: pa.Schema | None = None
    """The part's Arrow schema (readers group parts by it)."""


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
        meta = pq.read_metadata(path)
        if full:
            pq.read_table(path)
        status = PartStatus(path, meta.num_rows, None, meta.schema.to_arrow_schema())
    except (OSError, pa.ArrowException) as e:
        status = PartStatus(path, None, f"{type(e).__name__}: {e}")
    if not full:
        _FOOTER_CACHE[key] = status
    return status


@dataclass
class _Part:
    path: Path
    first: int
    last: int
    rows: int
    level: int


class Merger:
    """One writer's live merge: tiers of its own parts per table (see the module docstring).

    Args:
        parts: the writer's ``PartWriter``.
        max_rows: merged parts stop growing at this many rows (``TelemetryConfig.flush_rows``).
    """

    def __init__(self, parts: PartWriter, *, max_rows: int) -> None:
        self.parts, self.max_rows = parts, max_rows
        self.open: dict[str, list[_Part]] = {}
        """Per table, the parts still to be merged, oldest first."""
        self.covered: list[tuple[float, list[Path]]] = []
        """(monotonic time of the merge, the parts it covered), oldest first."""

    def add(self, table: str, path: Path, seq: int, rows: int) -> None:
        """Register a part just written; merge what is due (not after a compaction: the
        manifest names the parts the compacted database holds)."""
        if (self.parts.root / MANIFEST_NAME).exists():
            return
        tail = self.open.setdefault(table, [])
        if rows >= self.max_rows:
            tail.clear()  # a big part ends the tier: later merges cover only later parts
            return
        tail.append(_Part(path, seq, seq, rows, 0))
        while len(tail) >= FANIN and len({p.level for p in tail[-FANIN:]}) == 1:
            group = tail[-FANIN:]
            del tail[-FANIN:]
            if sum(p.rows for p in group) <= self.max_rows:
                tail.append(self._merge(table, group, group[0].level + 1))
                continue
            tail.clear()  # too big to merge whole: pack into parts of <= max_rows, all final
            chunk: list[_Part] = []
            for p in [*group, None]:
                if p is None or sum(q.rows for q in chunk) + p.rows > self.max_rows:
                    if len(chunk) > 1:
                        self._merge(table, chunk, group[0].level + 1)
                    chunk = []
                if p is not None:
                    chunk.append(p)

    def prune(self, older_than: float = PRUNE_AFTER_S) -> None:
        """Delete the parts covered at least ``older_than`` seconds ago."""
        now = time.monotonic()
        while self.covered and now - self.covered[0][0] >= older_than:
            for path in self.covered.pop(0)[1]:
                path.unlink(missing_ok=True)

    def _merge(self, table: str, group: list[_Part], level: int) -> _Part:
        spec = table_spec(table)
        data = pa.concat_tables([pq.read_table(p.path, schema=spec.arrow_schema) for p in group])
        path, _ = self.parts.write(data, spec, covers=(group[0].first, group[-1].last))
        self.covered.append((time.monotonic(), [p.path for p in group]))
        return _Part(path, group[0].first, group[-1].last, data.num_rows, level)
