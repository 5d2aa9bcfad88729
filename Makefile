# Everything runs from a project-local virtual environment that the targets create themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Grafana's dashboard schema and the TypeScript compiler, pinned, for the dashboards' schema test
SCHEMA := tests/dashboards/grafana_schema
SCHEMA_STAMP := $(SCHEMA)/node_modules/.installed-stamp

.PHONY: demo test lint bench traces clean

$(STAMP): pyproject.toml $(wildcard setup.py fdprof/*/*.c)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q nvidia-nvtx setuptools wheel
	$(PY) -m pip install -q --no-build-isolation -e '.[dev,build]'
	touch $@

venv: $(STAMP)

$(SCHEMA_STAMP): $(SCHEMA)/package.json $(SCHEMA)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		(cd $(SCHEMA) && npm ci --silent --no-audit --no-fund && touch node_modules/.installed-stamp) \
			|| echo "make: npm ci failed; the Grafana schema test will fail"; \
	else \
		echo "make: npm not found; the Grafana schema test will fail (apt-get install nodejs npm)"; \
	fi

demo: $(STAMP)
	$(VENV)/bin/fdprof ab --out out/demo

test: $(STAMP) $(SCHEMA_STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

traces: $(STAMP)
	$(PY) traces/regenerate.py

clean:
	rm -rf $(VENV) out build *.egg-info $(SCHEMA)/node_modules
