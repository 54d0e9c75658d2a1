# The two commands of the README:  `make demo`  and  `make test`.
# Each creates the virtualenv (.venv) on first use; torch is pinned by constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast fuzz bench lint clean venv wheel-check

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,tl]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tm2nn demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup -m 'not slow'

fuzz: $(STAMP)
	TM2NN_FUZZ=long $(PY) -m pytest -q -n 2 -k long tests/core/cli/test_fuzz_flags.py tests/core/syntax/test_fuzz_parsers.py tests/core/modelfile/test_fuzz_models.py

# CI's wheel job: python -m build, twine check, install into a fresh venv outside the repo,
# run check/compile/eval/verify there (.ci/wheel; docs/install.md)
wheel-check: $(STAMP)
	VENV=$(VENV) bash .ci/wheel

bench: $(STAMP)
	$(PY) bench/run_all.py

lint: $(STAMP)
	$(VENV)/bin/ruff check tm2nn tests bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
