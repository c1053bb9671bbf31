"""Tests for core.device: parsing, the CPU path, the missing-torch_npu error, a faked CUDA allocator."""

import importlib.util
import sys

import pytest
import torch

from core import device as device_mod
from core.device import AllocatorStats, Device, process_rss_bytes


def test_cpu_device_basics():
    dev = Device.from_string("cpu")
    assert dev.kind == "cpu" and dev.index == 0
    assert dev.torch_device == torch.device("cpu") and dev.name == "cpu"
    assert dev.allocator_stats() is None  # not measured on the CPU: None, never zero
    dev.synchronize()
    dev.reset_peak_stats()


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "", "cpu:", "tpu:0"])
def test_bad_spec_raises_value_error(spec):
    with pytest.raises(ValueError, match="cpu\\|cuda\\|npu\\|auto"):
        Device.from_string(spec)


def test_bad_fields_raise():
    with pytest.raises(ValueError, match="Device.kind"):
        Device(kind="xpu")
    with pytest.raises(ValueError, match="Device.index"):
        Device(kind="cpu", index=1)


def test_npu_without_torch_npu_names_package_and_install(monkeypatch):
    monkeypatch.setitem(
        sys.modules, "torch_npu", None
    )  # makes `import torch_npu` raise ImportError
    for make in (lambda: Device.from_string("npu"), lambda: Device(kind="npu", index=0)):
        with pytest.raises(RuntimeError, match=r"torch_npu.*pip install closedloop\[npu\]"):
            make()


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu installed")
def test_npu_error_without_monkeypatch():
    with pytest.raises(RuntimeError, match="torch_npu"):
        Device.from_string("npu:0")


def test_auto_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_mod, "_npu_available", lambda: False)
    assert Device.from_string("auto") == Device("cpu")


def test_cuda_unavailable_raises(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="cuda"):
        Device.from_string("cuda")


def test_fake_cuda_allocator_stats(monkeypatch):
    # The CUDA path without a GPU: the allocator functions are replaced by constants.
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev: 100)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev: 160)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda dev: 120)
    dev = Device(kind="cuda", index=1)
    assert dev.name == "cuda:1"
    stats = dev.allocator_stats()
    assert stats == AllocatorStats(allocated=100, reserved=160, max_allocated=120)
    assert stats.cached_free == 60  # reserved - allocated


def test_manual_seed_is_deterministic():
    dev = Device("cpu")
    dev.manual_seed(7)
    a = torch.randn(5)
    dev.manual_seed(7)
    assert torch.equal(a, torch.randn(5))


def test_autocast_support():
    dev = Device("cpu")
    assert dev.supports_autocast(torch.bfloat16) and dev.supports_autocast(torch.float32)
    assert not dev.supports_autocast(torch.int8)
    with pytest.raises(ValueError, match="autocast dtype"):
        dev.autocast(torch.int8)
    x = torch.ones(2, 2)
    with dev.autocast(torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16
    with dev.autocast(torch.float32):
        assert (x @ x).dtype == torch.float32


def test_process_rss_grows_with_a_touched_allocation():
    before = process_rss_bytes()
    assert before is not None and before > 0
    block = torch.ones(8 * 2**20)  # 32 MiB of float32, every page written
    after = process_rss_bytes()
    assert after - before >= 24 * 2**20, (before, after)
    del block
