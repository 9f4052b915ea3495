# The README's commands. Each creates .venv and installs the project first when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install browser run test test-fast check bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

## make run: set up and serve (granian + django-q2 cluster) on 127.0.0.1:$PORT (8000)
run: install
	$(BIN)/python manage.py serve

## Chromium for the browser tests, from the system's packages (Playwright never downloads one).
## Installed when missing and this is a Debian-like machine run as root; else the tests skip.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing Chromium for the browser tests…"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "Could not install Chromium: the browser tests will be skipped."; \
	  else echo "Chromium not found: the browser tests will be skipped (Debian: apt-get install chromium)."; fi; }

## make test: set up and run the whole suite (DATABASE_URL picks PostgreSQL)
test: install browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## make test-fast: the inner loop, the suite without the tests marked slow
test-fast: install
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

## make check: lint, format, types, migrations up to date
check: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/python manage.py makemigrations --check --dry-run

## make bench: run every benchmark, write BENCHMARKS.md (DATABASE_URL + REDIS_URL add PostgreSQL
## + Redis runs; BENCH_ARGS="--quick" or "--only NAME" to try it out)
bench: install
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
