# The two commands of the README's quickstart, the checks CI runs, and a quick tier.
#   make demo   - set up .venv with aiovec alone (first time only; on PYTHON, any Python aiovec
#                 supports) and run examples/quickstart.py
#   make test   - set up .venv (first time only), then lint, type-check, package-check, build the
#                 API reference (docs/, mkdocs) and test: the suite, with beside it the other
#                 venvs and a smoke run of the benchmark (prints its table, asserts nothing);
#                 then the serial tests, RLlib's tests in .venv-rllib, the agent frameworks'
#                 (OpenEnv, SkyRL-gym) in .venv-agents, and the core tests on the
#                 other supported Pythons (OTHER_PYTHONS)
#   make check  - the development loop: lint, type-check and every test not marked slow
#   make full   - the suite with every variant of every test, not a covering design of them
#                 (tests/variants.py), on every supported Python
#   make soak   - the soaks (chaos runs, start/stop cycles) at full length: ~10 min; the suite
#                 runs them compressed (tests/soak.py)
PYTHON ?= python3
VENV := .venv
# Bytecode is cached (in __pycache__/, ignored by git) even where the environment says not
# to (PYTHONDONTWRITEBYTECODE): else every pytest process rewrites every test module again
# (~5 s of CPU each; the suite starts ~25) and every fresh interpreter recompiles aiovec.
unexport PYTHONDONTWRITEBYTECODE
# Installs leave compiling to the first import: only the modules used are compiled (pip's
# own pass over every file of PyTorch, Ray and the rest took ~1 min of the ~1.7 of .venv).
PIP_INSTALL = -m pip install --quiet --no-compile
BIN := $(VENV)/bin
# Reinstall whenever the project's dependencies change, or PYTHON is another version.
DEPENDENCIES := $(shell cksum pyproject.toml | cut -d' ' -f1)
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
STAMP := $(VENV)/.installed-$(DEPENDENCIES)-py$(PYTHON_VERSION)
DEMO_STAMP := $(VENV)/.demo-installed-$(DEPENDENCIES)-py$(PYTHON_VERSION)

.PHONY: demo test check full lint typecheck unit unit-parallel unit-serial beside quick rllib agents \
	package \
	docs bench bench-quick bench-real other-pythons other-venvs soak clean

# A venv on PYTHON at $(VENV), with pip upgraded: made anew if it holds another Python version.
VENV_ON_PYTHON := if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -c 'import sys; \
	print("%d.%d" % sys.version_info[:2])')" != "$(PYTHON_VERSION)" ]; then \
	echo "$(VENV) holds another Python: made anew on $(PYTHON)"; rm -rf $(VENV); fi; \
	$(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP):
	$(VENV_ON_PYTHON)
	$(BIN)/python $(PIP_INSTALL) -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# The demo needs aiovec alone (its dependencies install in seconds on any supported Python);
# a venv set up for `make test` has it already.
$(DEMO_STAMP):
	if [ ! -e $(STAMP) ]; then $(VENV_ON_PYTHON) && \
		$(BIN)/python -m pip install --quiet -e .; fi
	rm -f $(VENV)/.demo-installed-*
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python examples/quickstart.py

# The suite on PYTHON keeps the 2 cores only ~70 % busy (its tests mostly wait), so what
# neither times anything nor shares its Ray runtime runs beside it, at a lower priority
# (`beside`: the RLlib venv and the other Pythons' venvs, then the benchmark's smoke run,
# which asserts nothing; the output is kept in BESIDE_LOG, printed after). Then, alone as
# before, one after another: the serial tests, RLlib's tests (a Ray runtime's start-up and a
# PPO training: beside the suite at nice 0 they saturated the cores and took 157-179 s, not
# 42; at nice 10 they would wait on it, against 120 s per-test timeouts), the other Pythons'
# tests (beside it, they saturated both cores, and a probe of the machine's speed failed:
# 2026-12-02).
BESIDE_LOG := build/beside.log

test: lint typecheck package docs
	@$(MAKE) --no-print-directory -j2 unit-parallel beside; status=$$?; \
		echo "=== beside the suite ($(BESIDE_LOG)):"; [ ! -f $(BESIDE_LOG) ] || cat $(BESIDE_LOG); \
		exit $$status
	$(MAKE) --no-print-directory unit-serial
	$(MAKE) --no-print-directory rllib
	$(MAKE) --no-print-directory agents
	$(MAKE) --no-print-directory other-pythons

# Each a sub-make of one goal, in turn: nothing runs beside another here.
beside:
	@mkdir -p build; { nice -n 10 $(MAKE) --no-print-directory $(RLLIB_STAMP) && \
		nice -n 10 $(MAKE) --no-print-directory $(AGENTS_STAMP) && \
		nice -n 10 $(MAKE) --no-print-directory other-venvs && \
		nice -n 10 $(MAKE) --no-print-directory bench-quick; } > $(BESIDE_LOG) 2>&1

lint: $(STAMP)
	$(BIN)/ruff check aiovec tests examples benchmarks tools

typecheck: $(STAMP)
	$(BIN)/mypy

# The API reference (mkdocs + mkdocstrings, strict: a broken reference fails the build).
docs: $(STAMP)
	$(BIN)/mkdocs build --quiet --strict --site-dir build/site

# The suite on PYTEST_WORKERS pytest-xdist workers. Its tests mostly wait (on worker
# processes, deadlines, servers), so more workers than cores pays: on a 2-core machine the
# full suite took 24 min serially, 16 min on 2 workers, 14 on 3 and 9.6 on 4 (other jobs
# shared the machine). More helps little: on a quiet 2-core machine (2026-12-02, a covering
# design close to today's) 4 workers took 527 s with the cores 71 % busy, 6 took 494 s at
# 89 %, and a busier machine leaves less room. The tests marked serial time the event loop itself, which a
# loaded machine skews: they run after, alone.
PYTEST_WORKERS ?= 4
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

# The process-backend tests of these suites run a second time with a parent worker (one share
# of the sub-envs on a thread of the test process: aiovec's parent_worker=True), so that its
# failures, deadlines, restarts and rollouts are checked exactly as a worker process's are.
# Every variant (AIOVEC_VARIANTS=full) but uvloop's (slow): a few hundred, ~25 s.
PARENT_WORKER_TESTS := tests/core/test_differential.py tests/core/test_first_ready.py \
	tests/core/test_loop_citizenship.py tests/core/test_out.py tests/core/test_limits.py \
	tests/faults tests/shim

# Each run leaves every test's duration in build/junit-*.xml (where the suite's time goes).
unit: unit-parallel
	$(MAKE) --no-print-directory unit-serial

unit-parallel: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not serial" --junitxml=build/junit-unit.xml
	AIOVEC_PARENT_WORKER=1 AIOVEC_VARIANTS=full $(BIN)/python -m pytest $(XDIST) -k process \
		-m "not serial and not slow and not worker_processes" $(PARENT_WORKER_TESTS)

unit-serial: $(STAMP)
	$(BIN)/python -m pytest -m serial --junitxml=build/junit-serial.xml

# Every test not marked slow (the slow ones still run in `make unit`): 4 minutes or less.
quick: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not slow and not serial"
	$(BIN)/python -m pytest -m "serial and not slow"

check: lint typecheck quick

# The suite with every variant: each loop against every combination of the other parameters,
# and every Ray variant (`make unit` runs a covering design of them: tests/variants.py); on
# the other Pythons too. About twice as long as `make unit`.
full:
	AIOVEC_VARIANTS=full $(MAKE) --no-print-directory unit other-pythons OTHER_VARIANTS=full

SOAKS := tests/faults/test_chaos.py tests/backends/test_process.py::test_fifty_cycles_and_a_crash_leak_nothing

soak: $(STAMP)
	AIOVEC_SOAK=1 $(BIN)/python -m pytest $(XDIST) $(SOAKS)

# RLlib pins its own Gymnasium (ray[rllib] 2.60: gymnasium==1.2.2), so its tests (tests/rllib)
# run in a venv of their own. torch is pinned: its CPU wheel, not GBs of CUDA, where a local
# wheel directory (PIP_FIND_LINKS) offers one.
RLLIB_VENV := .venv-rllib
RLLIB_STAMP := $(RLLIB_VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

$(RLLIB_STAMP):
	$(PYTHON) -m venv $(RLLIB_VENV)
	$(RLLIB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RLLIB_VENV)/bin/python $(PIP_INSTALL) torch==2.13.0 'ray[rllib]==2.60.0' \
		pytest pytest-timeout pytest-asyncio -e .
	rm -f $(RLLIB_VENV)/.installed-*
	touch $(RLLIB_STAMP)

rllib: $(RLLIB_STAMP)
	AIOVEC_RLLIB_TESTS=1 $(RLLIB_VENV)/bin/python -m pytest -p no:cacheprovider tests/rllib

# The agent frameworks aiovec adapts (aiovec.openenv, aiovec.skyrl), pinned, in a venv of their
# own (OpenEnv brings FastAPI, Gradio and an MCP server; SkyRL-gym pandas): tests/agents runs
# their own envs, and a real OpenEnv server it starts, under aiovec. Of each test, the variants
# that meet every value of every parameter (tests/variants.py's `each`): each worker process
# that hosts an OpenEnv client imports OpenEnv's server side with it, Gradio included (~3-8 s
# of CPU), so every loop against every backend would take minutes more.
AGENTS_VENV := .venv-agents
AGENTS_STAMP := $(AGENTS_VENV)/.agents-installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

$(AGENTS_STAMP):
	$(PYTHON) -m venv $(AGENTS_VENV)
	$(AGENTS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(AGENTS_VENV)/bin/python $(PIP_INSTALL) openenv-core==0.3.0 skyrl-gym==0.4.0 \
		pytest pytest-timeout pytest-asyncio trio uvloop httpx -e .
	rm -f $(AGENTS_VENV)/.agents-installed-*
	touch $(AGENTS_STAMP)

agents: $(AGENTS_STAMP)
	AIOVEC_VARIANTS=each AIOVEC_AGENT_TESTS=1 $(AGENTS_VENV)/bin/python -m pytest \
		-p no:cacheprovider tests/agents

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
	$(BIN)/python $(PIP_INSTALL) -e '.[dev,bench]'
	rm -f $(VENV)/.bench-installed-*
	touch $(BENCH_STAMP)

# A smoke run of the benchmark, in `make test` (so CI): it prints its table and asserts
# nothing; the figures of a busy CI machine are not quoted anywhere (~30 s, no EnvPool).
bench-quick: $(STAMP)
	$(BIN)/python benchmarks/run.py --quick --output build/bench-quick
	$(BIN)/python benchmarks/real_envs.py --quick --cells halfcheetah-8 --sections cells \
		--output build/bench-quick/real_envs.md

# The real workloads alone (Atari Pong, MuJoCo HalfCheetah, CartPole; ~15 min): make bench
# runs them too, as run.py's first companion.
bench-real: $(BENCH_STAMP)
	$(BIN)/python benchmarks/real_envs.py $(BENCH_ARGS)

# make bench [BENCH_ARGS="--quick" or "--repeats 5"]: see benchmarks/README.md
bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

# The other Pythons aiovec supports (requires-python): on each, the tests of the engine, the
# shim and its event loop, the codec, serving and the remote client, in a venv of its own
# (.venv-3.X) with only what those tests need (.[test-core]: no Ray, PyTorch or MuJoCo). An
# interpreter is python3.X on PATH or pyenv's (tools/find_python). One not found is said
# and skipped; with REQUIRE_OTHER_PYTHONS=1 (.ci/run) it is an error.
OTHER_PYTHONS ?= 3.10 3.12 3.13
OTHER_TESTS := tests/core tests/shim tests/wire tests/serve tests/remote tests/test_internals.py
OTHER_MARKS := not slow and not ray
# What differs between interpreters is asyncio and the interpreter's internals (the shim's
# loop driver, the codec's json scanner): every other Python runs the asyncio tests; the
# newest (TRIO_ON) runs the trio ones too, as the full suite does on PYTHON. (The uvloop
# variants are marked slow.)
TRIO_ON ?= 3.13
# Of each test, a few variants that meet every value of every parameter (tests/variants.py):
# what differs on another Python is the interpreter, which every test and every value meets.
OTHER_VARIANTS ?= each
OTHER_LOOPS = $(if $(filter $*,$(TRIO_ON)),,-k "not trio")

# other-venvs makes each one's venv only.
other-pythons other-venvs:
	@missing=""; for version in $(OTHER_PYTHONS); do \
		if tools/find_python $$version >/dev/null; then \
			$(MAKE) --no-print-directory $(if $(filter other-venvs,$@), \
				.venv-$$version/.installed-$(DEPENDENCIES),other-python-$$version) || exit 1; \
		elif [ "$(REQUIRE_OTHER_PYTHONS)" = 1 ]; then \
			echo "Python $$version not found, and REQUIRE_OTHER_PYTHONS=1" >&2; exit 1; \
		else missing="$$missing $$version"; fi; \
	done; \
	if [ -n "$$missing" ] && [ $@ = other-pythons ]; then \
		echo "*** Python$$missing not found: NOT tested on it" \
		"(install it, e.g. with pyenv, or set OTHER_PYTHONS)"; fi

# Kept: the stamp of a pattern rule is otherwise deleted as an intermediate file.
.PRECIOUS: .venv-%/.installed-$(DEPENDENCIES)
.venv-%/.installed-$(DEPENDENCIES):
	rm -rf .venv-$*
	$$(tools/find_python $*) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-$*/bin/python $(PIP_INSTALL) -e '.[test-core]'
	touch $@

other-python-%: .venv-%/.installed-$(DEPENDENCIES)
	@echo "--- Python $* ($$(.venv-$*/bin/python -c 'import sys; print(sys.version.split()[0])'))"
	AIOVEC_VARIANTS=$(OTHER_VARIANTS) .venv-$*/bin/python -m pytest -p no:cacheprovider $(XDIST) \
		-m "$(OTHER_MARKS) and not serial" $(OTHER_LOOPS) $(OTHER_TESTS)
	AIOVEC_VARIANTS=$(OTHER_VARIANTS) .venv-$*/bin/python -m pytest -p no:cacheprovider \
		-m "$(OTHER_MARKS) and serial" $(OTHER_LOOPS) $(OTHER_TESTS)

clean:
	rm -rf $(VENV) $(RLLIB_VENV) $(AGENTS_VENV) .venv-3.* dist build .mypy_cache .ruff_cache .pytest_cache
