# The one entry point users and CI run. Everything it needs is bootstrapped into
# the checkout from the package registry: a .venv holding uv and tox, then the
# locked workspace. No step downloads a Python interpreter.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export UV_PYTHON_DOWNLOADS := never
# uv is pointed at the interpreter of the .venv pip made: given a pyenv shim's
# python3 instead, uv replaced that .venv (and the uv and tox inside it).
export UV_PYTHON := $(CURDIR)/$(BIN)/python
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/$(VENV)
# Hardlinks from uv's cache (uv's default on Linux; it copies by itself when the cache is
# on another filesystem): .venv and the three tox envs are ~600 MB each, and copying
# them cost 4-5 s of wall and 3-6 s of system CPU apiece against 0.6 s and 1 s.
export UV_LINK_MODE := hardlink
# uv installs no .pyc: with PYTHONDONTWRITEBYTECODE set (some shells and CI images set it)
# every test process would compile numpy, starlette, pydantic and the workspace again
# (2.3 s of CPU to import the CLI against 1.0 s with the cache, over ~200 processes).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: bootstrap test lint type unit run soak bench bench-full bench-deps clean

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r tools/bootstrap.txt

# --inexact keeps the bootstrap tools that the lock does not list.
$(VENV)/.synced: $(BIN)/uv uv.lock pyproject.toml $(wildcard packages/*/pyproject.toml)
	$(BIN)/uv sync --frozen --inexact --all-packages --group dev
	touch $@

bootstrap: $(VENV)/.synced

# lint and type run beside the suite, not before it: the suite's workers wait on server
# processes much of the time, and mypy (~26 s of CPU in a fresh clone, no cache; 1-3 min
# of wall on a loaded host when run first) fills those gaps. -o streams every env's output
# as it comes (the coverage table included).
test: bootstrap
	$(BIN)/tox run-parallel -p all -o -e lint,type,py311

lint: bootstrap
	$(BIN)/tox run -e lint

type: bootstrap
	$(BIN)/tox run -e type

# The inner loop: every test not marked slow (slow: starts a server process or a
# PostgreSQL server, or takes over 2 s; see the root conftest.py), over every core.
unit: bootstrap
	$(BIN)/python -m pytest -n auto --dist worksteal -q -m "not slow and not soak"

# `make run` needs only what serving needs: the workspace without the dev group
# (no mypy, pytest, tox or the PostgreSQL wheel). --inexact keeps what is already in
# .venv, so `make run` after `make test` leaves the dev tools, and `make test` after
# `make run` syncs the dev group (its own stamp, .synced).
$(VENV)/.synced-run: $(BIN)/uv uv.lock pyproject.toml $(wildcard packages/*/pyproject.toml)
	$(BIN)/uv sync --frozen --inexact --no-dev --all-packages
	touch $@

# Ctrl-C stops the provider gracefully; its exit by SIGTERM (143) or SIGINT (130) after
# that is a normal stop, not a failed recipe (make would print "*** [run] Terminated").
run: $(VENV)/.synced-run
	@$(BIN)/ratatoskr serve --dev || { s=$$?; [ $$s -eq 130 ] || [ $$s -eq 143 ] || exit $$s; }

# `make run` with memory and affect on a throwaway local PostgreSQL + pgvector (data in
# var/pgserver/); Ctrl-C stops both and deletes the server's data.
.PHONY: run-postgres
run-postgres: bootstrap
	$(BIN)/python tools/run_postgres.py

# `make run-postgres` on a primary + synchronous standby (throwaway, data in a temporary
# directory), the provider on the multi-host DSN; it prints how to kill the primary and
# promote the standby by hand. Ctrl-C stops all three and deletes the data.
.PHONY: run-postgres-ha
run-postgres-ha: bootstrap
	$(BIN)/python tools/run_postgres_ha.py

# The long reliability runs (tests/reliability, marker `soak`; `make test` skips them):
# SIGKILL rounds, load, fuzzing. Figures go to var/reliability/ and docs/reliability.md.
soak: bootstrap
	RELIABILITY_REPORT_DIR=$(CURDIR)/var/reliability $(BIN)/python -m pytest -m soak -q -rA -p no:cacheprovider tests/reliability

# Benchmarks: a venv of their own (the locked workspace with the dev and bench groups),
# so `make bench` never changes what `make test` or `make unit` see in .venv (the bench
# group brings httpx2, which changes Starlette's TestClient); and a second venv for the
# LangGraph contender under Debian's python3, which can load SQLite extensions.
# Results go to benchmarks/results/<date>.md and PNGs beside it.
BENCH_VENV := benchmarks/.venv-bench
BENCH_BIN := $(BENCH_VENV)/bin
PEER_PYTHON ?= /usr/bin/python3
PEERS := benchmarks/.venv-peers

# Synced on every run (a no-op when in place), exactly to the lock.
bench-deps: $(BIN)/uv
	UV_PROJECT_ENVIRONMENT=$(CURDIR)/$(BENCH_VENV) $(BIN)/uv sync --frozen --all-packages --group dev --group bench

$(PEERS)/.installed: benchmarks/requirements-peers.txt
	$(PEER_PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --disable-pip-version-check -r benchmarks/requirements-peers.txt
	touch $@

# The PostgreSQL contender (our store on a throwaway pgvector server, beside the SQLite
# store) and LangGraph's PostgresStore as its peer; report in benchmarks/results/.
bench: bench-deps $(PEERS)/.installed
	$(BENCH_BIN)/python benchmarks/compare.py --profile quick --peer-python $(PEERS)/bin/python --update-readme
	$(BENCH_BIN)/python benchmarks/postgres_bench.py --n 100000 --peer-python $(PEERS)/bin/python --out benchmarks/results/postgres-quick.md

# N = 1M (and 100k at the quick settings), within an hour on 2 shared cores: compare.py
# ~38 min (ratatoskr loads all 1M; each peer's loading and every search mode time-boxed,
# the rows say how far they got), then postgres_bench ~12 min (the first 990k chunks by
# COPY, the last 10k timed through upsert_many; LangGraph's puts time-boxed to 120 s;
# the SQLite store's 1M figures are compare.py's).
bench-full: bench-deps $(PEERS)/.installed
	$(BENCH_BIN)/python benchmarks/compare.py --profile full --peer-python $(PEERS)/bin/python --update-readme
	$(BENCH_BIN)/python benchmarks/postgres_bench.py --n 1000000 --queries 50 --timed-upserts 10000 --no-sqlite --mode-budget 20 --min-queries 5 --peer-budget 120 --peer-python $(PEERS)/bin/python --out benchmarks/results/postgres-full.md

clean:
	rm -rf $(VENV) .tox .mypy_cache .ruff_cache .pytest_cache $(BENCH_VENV) $(PEERS)
