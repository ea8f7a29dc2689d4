# Every target sets itself up: a virtual environment in .venv, torch pinned by constraints.txt.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo bench test lint format clean test-pythons

# The whole test suite with one interpreter ($(1)), as `make test` and `make test-pythons` run it.
# torch.compile's Dynamo, once imported, changes torch.optim's disable wrappers process-wide: the
# kiln-inside-torch.compile tests run in a process of their own.
define run_suite
$(1) -m pytest -n 2 tests --ignore=tests/tools/test_torch_backend.py && \
	  $(1) -m pytest tests/tools/test_torch_backend.py
endef

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,bench,gpu]"
	touch $(STAMP)

demo: $(STAMP)            ## kiln's main job: compile models, check against eager, time them
	$(PY) -m kiln bench --quick

# The README's results table: the whole suite, kiln vs eager vs torch.compile. One thread and
# process CPU time keep the ratios steady on a shared 2-core machine; BENCH_ARGS overrides.
BENCH_ARGS ?= --threads 1 --timer cpu
bench: $(STAMP)
	$(PY) -m kiln bench $(BENCH_ARGS)

test: $(STAMP)            ## lint, format check, the whole test suite
	$(PY) -m ruff check kiln kiln_bench tests benchmarks
	$(PY) -m ruff format --check kiln kiln_bench tests benchmarks
	$(call run_suite,$(PY))

lint: $(STAMP)
	$(PY) -m ruff check kiln kiln_bench tests benchmarks
	$(PY) -m ruff format --check kiln kiln_bench tests benchmarks

format: $(STAMP)
	$(PY) -m ruff check --fix kiln kiln_bench tests benchmarks
	$(PY) -m ruff format kiln kiln_bench tests benchmarks

# The whole suite on the other supported Pythons, each in its own venv built from pyenv's
# interpreter (not part of CI: torch there is PyPI's CUDA build, ~5 GB per Python, run on the CPU).
# That build pins its own triton, so the triton line of constraints.txt (the gpu extra's, for 3.11's
# CPU torch) is left out there.
PYENV_ROOT    ?= $(shell pyenv root 2>/dev/null)
OTHER_PYTHONS := 3.12.1 3.13.0

.venv-%/.installed: pyproject.toml constraints.txt
	$(PYENV_ROOT)/versions/$(filter $*.%,$(OTHER_PYTHONS))/bin/python -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --upgrade pip
	grep -v '^triton==' constraints.txt > .venv-$*/constraints.txt
	.venv-$*/bin/python -m pip install -q -c .venv-$*/constraints.txt -e ".[dev,bench]"
	touch $@

test-pythons: $(foreach v,$(OTHER_PYTHONS),.venv-$(basename $(v))/.installed)
	status=0; for v in $(basename $(OTHER_PYTHONS)); do \
	  echo "== Python $$v"; { $(call run_suite,.venv-$$v/bin/python); } || status=1; \
	done; exit $$status

clean:
	rm -rf $(VENV) .venv-3.* build *.egg-info .pytest_cache
