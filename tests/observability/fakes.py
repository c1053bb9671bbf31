"""Valid fake batches for any telemetry table, generated from the schema (tests only)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from observability.schema import TableSpec

VOCAB = 100


def valid_columns(spec: TableSpec, n: int, seed: int = 0, start_id: int = 0) -> dict:
    """Columns for ``n`` rows of ``spec`` that pass every rule (sample_id unique from start_id)."""
    rng = np.random.default_rng(seed)
    out: dict = {}
    for c in spec.columns:
        if c.name == "run_id":
            continue
        t = c.value_type
        if c.name == "sample_id":
            out[c.name] = np.arange(start_id, start_id + n, dtype=np.int64)
        elif c.enum is not None:
            out[c.name] = [c.enum[i % len(c.enum)] for i in range(n)]
        elif c.is_list and pa.types.is_string(t):
            out[c.name] = [[f"tokens.c{j}" for j in range(i % 3)] for i in range(n)]
        elif c.is_list:
            out[c.name] = [list(rng.integers(0, 50, size=1 + i % 3)) for i in range(n)]
        elif pa.types.is_timestamp(t):
            out[c.name] = 1.7e9 + np.arange(n) * 0.5
        elif pa.types.is_boolean(t):
            out[c.name] = rng.random(n) < 0.5
        elif pa.types.is_integer(t):
            lo = 0 if c.min is None else max(int(c.min), 0)
            hi = VOCAB if c.below_vocab else 64 if c.max is None else int(c.max) + 1
            out[c.name] = rng.integers(lo, hi, size=n).astype(t.to_pandas_dtype())
        elif pa.types.is_floating(t):
            if c.max == 0.0:
                x = -rng.random(n) * 5
            elif c.max is not None:
                x = rng.random(n) * c.max
            elif c.min is not None:
                x = rng.random(n) * 10
            else:
                x = rng.normal(size=n)
            out[c.name] = x.astype(t.to_pandas_dtype())
        elif c.json:
            out[c.name] = [{"i": i, "name": c.name} for i in range(n)]
        else:
            out[c.name] = [f"{c.name}-{i % 7}" for i in range(n)]
    return out
