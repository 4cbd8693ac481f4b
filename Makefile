# The two set-up commands of the README: `make run` and `make test`.
# Each creates .venv (if missing), installs serbench with everything it
# needs, then runs. constraints.txt pins the exact versions (torch's CPU
# build); pyproject.toml states only the range serbench works with.
# `make check` is the edit-test loop: about a minute, against what is installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Both tiers run the tests in three processes (pytest-xdist) on a 2-core machine: much of the
# suite's time is spent waiting on processes it started (engines that sleep a model's step,
# cases that must time out), and a third fills it: 347-368 s instead of 383-388 s here
# (docs/measurements).
PYTEST := $(BIN)/python -m pytest -q --benchmark-disable -n 3 --dist worksteal

.PHONY: install install-vllm run test check system-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# uv installs (into the venv pip made), not pip: the vllm extra took pip 72 s here, uv 8 s
# (docs/measurements). uv reads none of pip's configuration, so the machine's find-links and extra
# indexes (this kind keeps torch's CPU build on disk) are handed on, every index trusted alike as
# pip does. Like `pip --no-compile`, uv writes no bytecode; these recipes let Python write the
# bytecode of what is imported, once, where the environment sets PYTHONDONTWRITEBYTECODE (this
# machine's and CI's do): without that, every process the suite starts compiled torch again.
pip_setting = $(shell $(PYTHON) -m pip config get global.$(1) 2>/dev/null)
UV := $(BIN)/uv
INSTALL := $(UV) pip install -q --python $(BIN)/python -c constraints.txt --index-strategy unsafe-best-match \
	$(addprefix --find-links ,$(call pip_setting,find-links)) \
	$(addprefix --extra-index-url ,$(call pip_setting,extra-index-url))
unexport PYTHONDONTWRITEBYTECODE

$(UV): | $(BIN)/python
	$(BIN)/pip install -qq --disable-pip-version-check -c constraints.txt uv

# Each install step runs again only when what it installs from (pyproject.toml, constraints.txt)
# changed since it last succeeded: a stamp file in .venv marks that. A fresh clone has no .venv,
# so installs.
$(VENV)/installed: pyproject.toml constraints.txt | $(UV)
	$(INSTALL) -e '.[test]'
	touch $@

install: $(VENV)/installed

# Debian packages the tests need: headless Chromium (the report test), valgrind
# (instruction counts under callgrind, docs/instructions.md).
SYSTEM_DEPS := chromium valgrind
system-deps:
	@missing="$(foreach p,$(SYSTEM_DEPS),$(if $(shell command -v $(p)),,$(p)))"; \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

run: install
	$(BIN)/serbench run

# The vLLM plugin's tests run against the real vLLM (docs/vllm.md): what its codec imports (the
# `vllm` extra), then the release constraints.txt pins, without its own dependencies (no CUDA
# torch, no kernels). It installs what `install` does and more, in one step; idempotent. See
# docs/vllm.md for what it adds to a fresh machine. vLLM's bytecode is compiled as it is installed
# (4 s here): left to the first imports, a fresh clone's first vLLM test took 38 s to set up
# against 21 s where the bytecode existed, and its vLLM-checkouts gate 96 s against 84 s; `make
# test` took 415-416 s (three runs), 406 and 411 s with it. Every package compiled so cost 35 s
# and saved nothing (docs/measurements).
$(VENV)/installed-vllm: pyproject.toml constraints.txt | $(UV)
	$(INSTALL) -e '.[test,vllm]'
	$(INSTALL) --no-deps --compile-bytecode vllm
	touch $(VENV)/installed $@

install-vllm: $(VENV)/installed-vllm

test: install-vllm system-deps
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
