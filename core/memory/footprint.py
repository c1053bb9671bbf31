"""What memory an object holds: its tensor / packed leaves, their storages and distinct bytes.

Objects are walked generically (tensors; objects with ``.tensors()`` such as quantized weights;
mappings, lists, tuples, dataclasses; objects that only report ``.nbytes``), so the ledger's
hooks need no per-type code. Simplification: a tensor's bytes are its whole storage (a view
holds all of it), and a storage is identified by (device, data pointer) — valid while it lives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch

Key = tuple[str, int]
"""A leaf's identity: (device, storage data pointer) for tensors, ("object", id) otherwise."""


def iter_leaves(
    obj: Any, prefix: str = "", *, packed: bool = False
) -> Iterator[tuple[str, Any, bool]]:
    """(name, leaf, packed) for every memory-holding leaf of ``obj``.

    Leaves are tensors and objects that only report ``.nbytes`` (e.g. numpy arrays); objects with
    ``.tensors()`` (quantized weights) yield their tensors as packed leaves; mappings, lists,
    tuples (named ones too) and dataclasses are walked; anything else holds no tracked memory.
    """
    if isinstance(obj, torch.Tensor):
        yield prefix, obj, packed
    elif callable(getattr(obj, "tensors", None)):
        for sub, t in obj.tensors().items():
            yield from iter_leaves(t, f"{prefix}.{sub}" if prefix else str(sub), packed=True)
    elif isinstance(obj, Mapping):
        for sub, value in obj.items():
            yield from iter_leaves(value, f"{prefix}.{sub}" if prefix else str(sub), packed=packed)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from iter_leaves(value, f"{prefix}.{i}" if prefix else str(i), packed=packed)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            yield from iter_leaves(value, f"{prefix}.{f.name}" if prefix else f.name, packed=packed)
    elif hasattr(obj, "nbytes"):
        yield prefix, obj, True


def leaf_key(leaf: Any) -> Key:
    """The leaf's :data:`Key` (its storage for tensors: views of one storage share it)."""
    if isinstance(leaf, torch.Tensor):
        return str(leaf.device), leaf.untyped_storage().data_ptr()
    return "object", id(leaf)


def leaf_bytes(leaf: Any) -> int:
    """Physical bytes: the whole storage of a tensor (a view holds it all), else ``.nbytes``."""
    if isinstance(leaf, torch.Tensor):
        return leaf.untyped_storage().nbytes()
    return int(leaf.nbytes)


def distinct_bytes(obj: Any, seen: set[Key]) -> tuple[int, list[torch.Tensor], set[str]]:
    """(bytes of storages not in ``seen``, their tensors, their dtypes); adds them to ``seen``."""
    total, tensors, dtypes = 0, [], set()
    for _, leaf, _ in iter_leaves(obj):
        key, nbytes = leaf_key(leaf), leaf_bytes(leaf)
        if nbytes == 0 or key in seen:
            continue
        seen.add(key)
        total += nbytes
        if isinstance(leaf, torch.Tensor):
            tensors.append(leaf)
            dtypes.add(str(leaf.dtype).removeprefix("torch."))
        else:
            dtypes.add(type(leaf).__name__)
    return total, tensors, dtypes
