# The two set-up commands of the README, `make run` and `make test`, create .venv (if missing),
# install serbench with everything it needs, then run. constraints.txt pins the exact versions
# (torch's CPU build); pyproject.toml states only the range serbench works with.
# `make check` is the edit-test loop, against what is installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Both tiers run the tests in three processes (pytest-xdist) on a 2-core machine: much of the
# suite's time is spent waiting on processes it started (engines that sleep a model's step, cases
# that must time out), and a third fills it (docs/measurements/2026-12-03-test-time-and-stability.md).
PYTEST := $(BIN)/python -m pytest -q --benchmark-disable -n 3 --dist worksteal

.PHONY: install install-vllm install-sglang run test check system-deps

# The install steps say what they do in one line rather than echo their long commands, so that
# `make run` on a fresh clone still fits its answer on one screen.
$(BIN)/python:
	@echo "installing serbench and what it needs into $(VENV)/ (once)"
	@$(PYTHON) -m venv $(VENV)

# uv installs (into the venv pip made), not pip: much faster on a fresh venv
# (docs/measurements/2026-12-03-test-time-and-stability.md). uv reads none of pip's configuration,
# so the machine's find-links and extra indexes (this kind keeps torch's CPU build on disk) are
# handed on, every index trusted alike as pip does.
pip_setting = $(shell $(PYTHON) -m pip config get global.$(1) 2>/dev/null)
UV := $(BIN)/uv
INSTALL := $(UV) pip install -q --python $(BIN)/python -c constraints.txt --index-strategy unsafe-best-match \
	$(addprefix --find-links ,$(call pip_setting,find-links)) \
	$(addprefix --extra-index-url ,$(call pip_setting,extra-index-url))
# Like `pip --no-compile`, uv writes no bytecode: these recipes let Python write that of what is
# imported, once, where the environment sets PYTHONDONTWRITEBYTECODE (this machine's and CI's
# do), or every process the suite starts would compile torch again.
unexport PYTHONDONTWRITEBYTECODE

$(UV): | $(BIN)/python
	@$(BIN)/pip install -qq --disable-pip-version-check -c constraints.txt uv

# Each install step runs again only when what it installs from (pyproject.toml, constraints.txt)
# changed since it last succeeded: a stamp file in .venv marks that. A fresh clone has no .venv,
# so installs.
$(VENV)/installed: pyproject.toml constraints.txt | $(UV)
	@$(INSTALL) -e '.[test]'
	@touch $@

install: $(VENV)/installed

# Debian packages the tests need: headless Chromium (the report test), valgrind
# (instruction counts under callgrind, docs/instructions.md).
SYSTEM_DEPS := chromium valgrind
system-deps:
	@missing="$(foreach p,$(SYSTEM_DEPS),$(if $(shell command -v $(p)),,$(p)))"; \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

run: install
	@$(BIN)/serbench run

# The vLLM plugin's tests run against the real vLLM (docs/vllm.md): what its codec imports (the
# `vllm` extra), then the release constraints.txt pins, without its own dependencies (no CUDA
# torch); what `install` installs and more, in one step. Of all packages, only vLLM's bytecode
# paid for compiling it at install (docs/measurements/2026-12-07-micro-copy-tie.md).
$(VENV)/installed-vllm: pyproject.toml constraints.txt | $(UV)
	$(INSTALL) -e '.[test,vllm]'
	$(INSTALL) --no-deps --compile-bytecode vllm
	touch $(VENV)/installed $@

install-vllm: $(VENV)/installed-vllm

# The SGLang plugin's tests run against the real SGLang (docs/sglang.md), installed as vLLM is:
# what its messages' import needs (the `sglang` extra), then the pinned sglang and the torchvision
# built for the pinned torch, both without their dependencies; on top of install-vllm.
$(VENV)/installed-sglang: pyproject.toml constraints.txt $(VENV)/installed-vllm
	$(INSTALL) -e '.[test,vllm,sglang]'
	$(INSTALL) --no-deps sglang torchvision
	touch $@

install-sglang: $(VENV)/installed-sglang

test: install-sglang system-deps
	$(BIN)/lint-imports
	$(PYTEST)

# The fast tier: the tests not marked slow (tests/conftest.py: none starts a run, an engine, a
# gate, valgrind, asv or Chromium; the conformance suite of every built-in is among them), then
# one run of every scenario on the smallest matrix, end to end. No vLLM, no system packages.
SMOKE := --backends msgspec-frombuffer --workloads text-sonnet
check: install
	$(BIN)/lint-imports
	$(PYTEST) -m 'not slow'
	out=$$(mktemp -d) && $(BIN)/serbench run $(SMOKE) --out $$out && rm -r $$out
