# The two set-up commands of the README: `make run` and `make test`.
# Each creates .venv (if missing), installs serbench with everything it
# needs, then runs. constraints.txt pins the exact versions (torch's CPU
# build); pyproject.toml states only the range serbench works with.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-vllm run test system-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'

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
# docs/vllm.md for what it adds to a fresh machine.
install-vllm: $(BIN)/python
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,vllm]'
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt --no-deps vllm

test: install-vllm system-deps
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q --benchmark-disable
