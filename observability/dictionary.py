"""``StringDictionary``: a producer's recurring strings as a dictionary-encoded Arrow column.

A producer that emits the same few strings every step (the memory ledger's categories, owners,
dtypes) hands the sink ``pa.DictionaryArray`` columns built from integer codes: the codes are
looked up while the strings are hot on the training thread, and the background writer then joins
and decodes contiguous buffers (one C++ ``cast`` per column) instead of walking thousands of
Python string objects two seconds later, cold. The sink stores the column as its schema's
``string`` type: the dictionary is only how the batch travels.

Bounded: past ``max_size`` distinct strings (or for a batch holding None) ``encode`` returns a
plain string array, so a high-cardinality column costs no more than converting it directly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


class StringDictionary:
    """Interns the strings of one column; ``encode`` returns them as a ``pa.DictionaryArray``.

    Args:
        max_size: most distinct strings kept (>= 1); beyond it ``encode`` returns plain arrays.
    """

    def __init__(self, max_size: int = 4096) -> None:
        if max_size < 1:
            raise ValueError(f"StringDictionary max_size must be >= 1, got {max_size}")
        self.max_size = max_size
        self._codes: dict[str, int] = {}
        self._values: list[str] = []
        self._dictionary: pa.Array = pa.array([], type=pa.string())

    def __len__(self) -> int:
        return len(self._values)

    def encode(self, values: Sequence[str | None]) -> pa.Array:
        """``values`` [N] as a dictionary array over every string seen so far (codes stable across
        calls), or as a plain ``string`` array when they hold None or would overflow ``max_size``."""
        codes = self._codes
        try:
            idx = [codes[v] for v in values]
        except (KeyError, TypeError):  # a new string (or an unhashable / None value)
            if not self._add(values):
                return pa.array(values, type=pa.string())
            idx = [codes[v] for v in values]
        return pa.DictionaryArray.from_arrays(np.array(idx, dtype=np.int32), self._dictionary)

    def _add(self, values: Sequence[str | None]) -> bool:
        """Intern ``values``' new strings; False (nothing added) if one is not a str or the
        dictionary would outgrow ``max_size``."""
        if not all(type(v) is str for v in values):
            return False
        new = [v for v in dict.fromkeys(values) if v not in self._codes]
        if len(self._values) + len(new) > self.max_size:
            return False
        for v in new:
            self._codes[v] = len(self._values)
            self._values.append(v)
        self._dictionary = pa.array(self._values, type=pa.string())
        return True
