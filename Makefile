# Two commands for a new user: `make run` and `make test`. Both create .venv from pyproject.toml when missing.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
REF     ?= $(firstword $(wildcard ../shared/reference) tests/reference)

.PHONY: run sweep figures validate calibrate test bench lint venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

SPACE   ?= spaces/default.yaml
JOBS    ?= -1
NAME     = $(basename $(notdir $(SPACE)))

# Main job: sweep the embedded default space into results/default (Parquet), summarize the best layouts, print
# the speed-vs-cost Pareto front per model and draw the standard figures into results/figures/default (PNG, with
# each figure's data as Parquet beside it); then the serving space (Llama-3.3 70B in-flight batching on four
# systems): its throughput-vs-interactivity front per system and figures in results/figures/serve-llama3.3-70b.
run: $(STAMP)
	rm -rf results/default results/figures/default
	$(BIN)/dse run spaces/default.yaml -o results/default --jobs $(JOBS)
	$(BIN)/dse info results/default --metric tokens_per_s_per_gpu
	$(BIN)/dse pareto results/default --objectives step_time_s:min cost_per_million_tokens_usd:min --by model \
		--top 6 -o results/figures/default/pareto_time_cost.csv
	$(BIN)/dse plot results/default -o results/figures/default
	rm -rf results/serve-llama3.3-70b results/figures/serve-llama3.3-70b
	$(BIN)/dse run spaces/serve-llama3.3-70b.yaml -o results/serve-llama3.3-70b --jobs $(JOBS)
	$(BIN)/dse pareto results/serve-llama3.3-70b --objectives tokens_per_s_per_user:max \
		output_tokens_per_s_per_gpu:max --by system --top 5 \
		-o results/figures/serve-llama3.3-70b/serving_frontier.csv
	$(BIN)/dse plot results/serve-llama3.3-70b -o results/figures/serve-llama3.3-70b

# Any space: make sweep SPACE=spaces/llama3-70b-h100.yaml JOBS=2 (resumes an interrupted run of the same spec).
sweep: $(STAMP)
	$(BIN)/dse run $(SPACE) -o results/$(NAME) --jobs $(JOBS) $(if $(wildcard results/$(NAME)/_spec.yaml),--resume,)
	$(BIN)/dse info results/$(NAME)

# The standard figures of the default sweep (run first when missing), the serving spaces, today's models
# (DeepSeek-V3 training; DeepSeek-R1 and GPT-OSS-120B serving) and the technology studies (issue: technology
# nodes 12 nm -> 1 nm), PNG + Parquet data under results/figures/.
figures: $(STAMP)
	test -f results/default/_spec.yaml || $(BIN)/dse run spaces/default.yaml -o results/default --jobs $(JOBS)
	$(BIN)/dse plot results/default -o results/figures/default
	test -f results/serve-llama3.3-70b/_spec.yaml || $(BIN)/dse run spaces/serve-llama3.3-70b.yaml -o results/serve-llama3.3-70b --jobs $(JOBS)
	$(BIN)/dse plot results/serve-llama3.3-70b -o results/figures/serve-llama3.3-70b
	test -f results/deepseek-v3-train/_spec.yaml || $(BIN)/dse run spaces/deepseek-v3-train.yaml -o results/deepseek-v3-train --jobs $(JOBS)
	$(BIN)/dse plot results/deepseek-v3-train -o results/figures/deepseek-v3-train
	test -f results/serve-deepseek-r1-gpt-oss/_spec.yaml || $(BIN)/dse run spaces/serve-deepseek-r1-gpt-oss.yaml -o results/serve-deepseek-r1-gpt-oss --jobs $(JOBS)
	$(BIN)/dse plot results/serve-deepseek-r1-gpt-oss -o results/figures/serve-deepseek-r1-gpt-oss
	$(BIN)/python -m dse.studies -o results/figures/studies

# The model against every measured case in shared/reference.
validate: $(STAMP)
	$(BIN)/dse validate $(REF)/*.csv

# Fit the efficiency constants to the reference cases (a demonstration of `dse calibrate` on your own cases).
calibrate: $(STAMP)
	$(BIN)/dse calibrate $(REF)/*.csv -o results/calibration.yaml --no-loo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m dse.bench
	$(BIN)/python -m dse.bench.pareto

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	$(BIN)/ruff check dse tests
	$(BIN)/mypy dse

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
