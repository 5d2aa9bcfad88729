# Everything runs from a project-local virtual environment that the targets create themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench traces clean

$(STAMP): pyproject.toml $(wildcard setup.py fdprof/*/*.c)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q nvidia-nvtx setuptools wheel
	$(PY) -m pip install -q --no-build-isolation -e '.[dev,build]'
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fdprof ab --out out/demo

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

traces: $(STAMP)
	$(PY) traces/regenerate.py

clean:
	rm -rf $(VENV) out build *.egg-info
