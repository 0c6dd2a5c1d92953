# The one entry point users and CI run. Everything it needs is bootstrapped into
# the checkout from the package registry: a .venv holding uv and tox, then the
# locked workspace. No step downloads a Python interpreter.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(shell command -v $(PYTHON))
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/$(VENV)
export UV_LINK_MODE := copy

.PHONY: bootstrap test lint type unit run soak bench bench-full clean

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r tools/bootstrap.txt

# --inexact keeps the bootstrap tools that the lock does not list.
$(VENV)/.synced: $(BIN)/uv uv.lock pyproject.toml $(wildcard packages/*/pyproject.toml)
	$(BIN)/uv sync --frozen --inexact --all-packages --group dev
	touch $@

bootstrap: $(VENV)/.synced

test: bootstrap
	$(BIN)/tox run -e lint,type,py311

lint: bootstrap
	$(BIN)/tox run -e lint

type: bootstrap
	$(BIN)/tox run -e type

unit: bootstrap
	$(BIN)/python -m pytest -q

run: bootstrap
	$(BIN)/ratatoskr serve --dev

clean:
	rm -rf $(VENV) .tox .mypy_cache .ruff_cache .pytest_cache
