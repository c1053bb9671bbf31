#!/usr/bin/env bash
# The prepared check for a lent GPU machine (issue 34, item 5); about 10 minutes, run from the
# repository root:   bash benchmarks/gpu_check.sh
# The GPU machine reaches no package registry, so vLLM's CUDA build (`pip install vllm`, not the
# CPU wheel `make vllm` installs) must already be in the Python it is given (PY, default
# .venv/bin/python). The same adapter (core/rollout/vllm_engine.py) runs there: vLLM picks its
# CUDA platform by itself; reload_weights works in place on the in-process engine core, and the
# read-back reads the (unpacked) CUDA parameters directly.
# 1. the vLLM loop on CUDA: the conformance suite and the vLLM engine tests (GRPO and agentic runs
#    on vLLM, gated);
# 2. bf16 numerics: the train-inference gap table (fp32 / bf16 rows, both engines);
# 3. the memory ledger against CUDA's allocator (benchmarks/memory_gpu.py, goal: within 5%).
set -uo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
"$PY" -c "import torch, vllm; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'vllm', vllm.__version__)" \
  | tee "$OUT/versions.txt" || { echo "vLLM (CUDA build) is not importable here"; exit 2; }
status=0
timeout 300 "$PY" -m pytest -q -m vllm tests/core/rollout tests/core/teachers -p no:cacheprovider \
  2>&1 | tail -25 | tee "$OUT/vllm_tests.txt" || status=1
timeout 150 "$PY" benchmarks/vllm_engine.py --only gap --steps 5 2>&1 \
  | grep -E "^(==|engine|embedded|vllm) " | tee "$OUT/gap.txt" || status=1
timeout 120 "$PY" benchmarks/memory_gpu.py --steps 3 2>&1 | tail -8 | tee "$OUT/memory.txt" || status=1
exit $status
