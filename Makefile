# The two set-up commands of the README: `make run` and `make test`.
# Each creates .venv (if missing), installs serbench with everything it
# needs, then runs. constraints.txt pins the exact versions (torch's CPU
# build); pyproject.toml states only the range serbench works with.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install run test system-deps

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

test: install system-deps
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q --benchmark-disable
