# Two commands for a new user: `make run` and `make test`. Both create .venv from pyproject.toml when missing.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
REF     ?= $(firstword $(wildcard ../shared/reference) tests/reference)

.PHONY: run test bench lint venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# Main job until the sweep engine lands: explain one configuration, then validate every reference file.
run: $(STAMP)
	$(BIN)/dse explain --model gpt3-175b --system a100-sxm-80gb --gpus 1024 --tp 8 --pp 8 --vpp 2 \
	    --micro-batch 1 --global-batch 1536 --seq-len 2048 --recompute selective --sp 1
	$(BIN)/dse validate $(REF)/*.csv --assume dse/validation/reference_assumptions.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m dse.bench

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	$(BIN)/ruff check dse tests
	$(BIN)/mypy dse

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
