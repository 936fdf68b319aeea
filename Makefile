# The two commands of the README's quickstart, and the checks CI runs.
#   make demo   - set up .venv (first time only) and run examples/quickstart.py
#   make test   - set up .venv (first time only), then lint, type-check, package-check, build the
#                 API reference (docs/, mkdocs) and test, then RLlib's tests in .venv-rllib
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Reinstall whenever the project's dependencies change.
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint typecheck unit rllib package docs bench clean

$(STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

test: lint typecheck package docs unit rllib

lint: $(STAMP)
	$(BIN)/ruff check aiovec tests examples benchmarks tools

typecheck: $(STAMP)
	$(BIN)/mypy

# The API reference (mkdocs + mkdocstrings, strict: a broken reference fails the build).
docs: $(STAMP)
	$(BIN)/mkdocs build --quiet --strict --site-dir build/site

unit: $(STAMP)
	$(BIN)/python -m pytest

# RLlib pins its own Gymnasium (ray[rllib] 2.60: gymnasium==1.2.2), so its tests (tests/rllib)
# run in a venv of their own. torch is pinned: its CPU wheel, not GBs of CUDA, where a local
# wheel directory (PIP_FIND_LINKS) offers one.
RLLIB_VENV := .venv-rllib
RLLIB_STAMP := $(RLLIB_VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

$(RLLIB_STAMP):
	$(PYTHON) -m venv $(RLLIB_VENV)
	$(RLLIB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RLLIB_VENV)/bin/python -m pip install --quiet torch==2.13.0 'ray[rllib]==2.60.0' \
		pytest pytest-timeout pytest-asyncio -e .
	rm -f $(RLLIB_VENV)/.installed-*
	touch $(RLLIB_STAMP)

rllib: $(RLLIB_STAMP)
	AIOVEC_RLLIB_TESTS=1 $(RLLIB_VENV)/bin/python -m pytest -p no:cacheprovider tests/rllib

# Build the wheel and sdist, then import aiovec from the wheel alone: packaging cannot rot.
package: $(STAMP)
	rm -rf dist build/wheel-check
	$(BIN)/python -m build --quiet --outdir dist .
	$(BIN)/python -m pip install --quiet --no-deps --target build/wheel-check dist/*.whl
	cd build && PYTHONPATH=wheel-check ../$(BIN)/python -c "import aiovec, aiovec.testing, \
	pathlib; assert 'wheel-check' in aiovec.__file__, aiovec.__file__; \
	assert (pathlib.Path(aiovec.__file__).parent / 'py.typed').exists(); \
	print('wheel OK:', aiovec.__version__, sorted(aiovec.__all__)[:3], '...')"

# The benchmark's extra dependencies (.[bench]) are installed on first use only.
BENCH_STAMP := $(VENV)/.bench-installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	rm -f $(VENV)/.bench-installed-*
	touch $(BENCH_STAMP)

# make bench [BENCH_ARGS="--quick" or "--repeats 5"]: see benchmarks/README.md
bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(RLLIB_VENV) dist build .mypy_cache .ruff_cache .pytest_cache
