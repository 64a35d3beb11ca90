# Entry points on a fresh machine: `make demo` and `make test` create .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)
PIP    := $(BIN)/python -m pip

.PHONY: demo test check lint install clean browser report-example submit-examples errors-doc \
        bench-regression

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e '.[export,embedded,test]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/offline-iaas demo --workdir demo-work

# The report's browser test needs Debian's chromium and chromedriver; installed once (root).
browser:
	@if test -x /usr/bin/chromium && test -x /usr/bin/chromedriver; then :; \
	elif apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	     apt-get install -y -qq chromium chromium-driver >/dev/null; then \
	  echo "browser: installed chromium and chromium-driver"; \
	else echo "browser: could not install chromium (the browser test will be skipped)"; fi

# The whole suite on TEST_WORKERS pytest-xdist workers (3 on 2 cores: the servers' start-ups and
# the clients' waits left a quarter of the two cores idle with 2); a test module stays on one worker
# (its module-scoped servers and datasets are set up once), in the order tests/conftest.py sets
# (the longest modules first; xdist would otherwise start the modules with most tests first).
TEST_WORKERS ?= 3
test: $(STAMP) browser
	$(BIN)/ruff check src tests
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# Before every commit: ruff, then every test not marked slow (slow: those that start a
# tritonserver, which tests/conftest.py refuses to the others, and the few that take 10 s of CPU
# or more without one or spin a core until a reader's timeout), on CHECK_WORKERS pytest-xdist
# workers, a test module on one worker (xdist's default spread a module's tests over both, and
# each worker set up its module-scoped datasets, trainings and repositories again).
CHECK_WORKERS ?= 2
check: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/python -m pytest -q -m "not slow" -n $(CHECK_WORKERS) --dist loadfile --durations=10

# The tiny workload's service/limit against benchmarks/regression.json (exit 1 if it halved): a
# benchmark, run on a quiet machine, not part of `make test` (the ratios move with the machine).
bench-regression: $(STAMP)
	$(BIN)/python -m offline_iaas.bench.regression --check benchmarks/regression.json

# docs/report-example.png: the demo's report in headless Chromium (runs the whole demo).
report-example: $(STAMP) browser
	$(BIN)/offline-iaas demo --workdir demo-work
	$(BIN)/offline-iaas report demo-work/run
	$(BIN)/python -m tests.browser demo-work/run/report/index.html docs/report-example.png

# submit/rendered/: the submit files each site profile receives for the demo campaign.
submit-examples: $(STAMP)
	rm -rf submit/rendered
	$(BIN)/python -m offline_iaas.workflow.examples submit/rendered

# docs/errors.md: each catalogue row's message written from the test that produces it
# (tests/error_catalogue.py); the tests that document messages, servers included (minutes).
errors-doc: $(STAMP)
	OFFLINE_IAAS_WRITE_ERRORS_DOC=1 $(BIN)/python -m pytest -q -p no:cacheprovider \
	  $$(grep -l "documented(" tests/test_*.py tests/*/test_*.py)

lint: $(STAMP)
	$(BIN)/ruff check src tests

clean:
	rm -rf demo-work .pytest_cache
