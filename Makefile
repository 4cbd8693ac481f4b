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

# Headless Chromium for the report test (Debian package).
system-deps:
	command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

run: install
	$(BIN)/serbench run

test: install system-deps
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q --benchmark-disable
