# Entry points on a fresh machine: `make demo` and `make test` create .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)
PIP    := $(BIN)/python -m pip

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e '.[export,embedded,test]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/offline-iaas demo --workdir demo-work

test: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests

clean:
	rm -rf demo-work .pytest_cache
