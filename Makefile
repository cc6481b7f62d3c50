# Two commands for a new user: `make run` and `make test`. Both create .venv from pyproject.toml when missing.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
REF     ?= $(firstword $(wildcard ../shared/reference) tests/reference)

.PHONY: run sweep validate test bench lint venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

SPACE   ?= spaces/default.yaml
JOBS    ?= -1
NAME     = $(basename $(notdir $(SPACE)))

# Main job: sweep the embedded default space into results/default (Parquet), then summarize it.
run: $(STAMP)
	rm -rf results/default
	$(BIN)/dse run spaces/default.yaml -o results/default --jobs $(JOBS)
	$(BIN)/dse info results/default --metric tokens_per_s_per_gpu --top 25

# Any space: make sweep SPACE=spaces/llama3-70b-h100.yaml JOBS=2 (resumes an interrupted run of the same spec).
sweep: $(STAMP)
	$(BIN)/dse run $(SPACE) -o results/$(NAME) --jobs $(JOBS) $(if $(wildcard results/$(NAME)/_spec.yaml),--resume,)
	$(BIN)/dse info results/$(NAME)

# The model against every measured case in shared/reference.
validate: $(STAMP)
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
