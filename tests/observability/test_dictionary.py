"""``StringDictionary``: stable codes across batches, plain arrays past the bound or for None."""

import pyarrow as pa
import pytest

from observability.dictionary import StringDictionary


def test_codes_are_stable_and_decode_to_the_values():
    d = StringDictionary()
    a = d.encode(["x", "y", "x"])
    b = d.encode(["z", "x"])
    assert pa.types.is_dictionary(a.type) and a.indices.to_pylist() == [0, 1, 0]
    assert b.indices.to_pylist() == [2, 0] and b.to_pylist() == ["z", "x"]
    assert a.to_pylist() == ["x", "y", "x"] and len(d) == 3
    assert d.encode([]).to_pylist() == []


def test_none_and_overflow_give_plain_string_arrays_and_keep_the_codes():
    d = StringDictionary(max_size=2)
    d.encode(["a"])
    plain = d.encode(["a", None])
    assert plain.type == pa.string() and plain.to_pylist() == ["a", None]
    over = d.encode(["b", "c"])  # two new strings would make three
    assert over.type == pa.string() and over.to_pylist() == ["b", "c"]
    assert len(d) == 1 and d.encode(["b"]).indices.to_pylist() == [1]


def test_max_size_must_be_positive():
    with pytest.raises(ValueError, match="max_size must be >= 1, got 0"):
        StringDictionary(max_size=0)
