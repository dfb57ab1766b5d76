"""Project configuration. Every value that varies by deployment comes from the environment
through chatsite.env; docs/configuration.md lists each variable in the order of the groups
below (Django, logging, the store, Redis, the engine, the chat, the API, the first accounts, bulk
jobs, monitoring, Celery's schedule, security). A value's own range is checked as it is read;
rules across several settings are system checks (chatsite/checks.py and each app's checks.py)."""

import ipaddress
import shutil
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from chatsite import signon, signon_saml
from chatsite.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_secret,
    env_str,
    private_secret,
    web_drain_seconds,
)

# Django.
BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("DATA_DIR", str(BASE_DIR / "var")))

# Production mode unless told otherwise, as `make run` serves it; `make dev` and `make test` set
# DEBUG=true for development.
DEBUG = env_bool("DEBUG", False)
_DEV_SECRET_KEY = "dev-only-insecure-key-change-me"
# The key itself, or the file that holds it (SECRET_KEY_FILE); else the one `make run` made in the
# data folder, so a management command run by hand on that install signs as its web processes do.
_MADE_SECRET_KEY = DATA_DIR / "secret-key"
SECRET_KEY = (
    env_secret("SECRET_KEY") or (_MADE_SECRET_KEY.read_text().strip() if _MADE_SECRET_KEY.is_file() else "")
) or _DEV_SECRET_KEY
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "redisconn",
    "inference",
    "enginehost",
    "answers",
    "apitokens",
    "jobs",
    "conversations",
    "knowledge",
    "chat",
    "openai_api",
    "batches",
    "monitoring",
    "csp",
    "accounts",
    "usage",
    "audit",
    # Single sign-on (sso/) through django-allauth's social accounts; its OpenID Connect views are
    # sso.oidc's, and none of allauth's account views (signup, password reset) is mounted.
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "allauth.socialaccount.providers.saml",
    "sso",
    "chatsite",
]

MIDDLEWARE = [
    # A request id on every log record of the request (monitoring/).
    "monitoring.middleware.request_id_middleware",
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every response (see Security below).
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Refuses a throttled login before its session is loaded (accounts/).
    "accounts.throttle.login_throttle_middleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # django-allauth's request context (sso/).
    "allauth.account.middleware.AccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "chatsite.urls"
ASGI_APPLICATION = "chatsite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
WHITENOISE_USE_FINDERS = DEBUG

# Logging: request, conversation and message ids on every record (logcontext/).
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
LOG_FORMAT = env_choice("LOG_FORMAT", "plain", {"plain", "json"})
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"log_ids": {"()": "logcontext.ContextFilter"}},
    "formatters": {
        "plain": {"()": "logcontext.PlainFormatter"},
        "json": {"()": "logcontext.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["log_ids"]}
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"httpx": {"level": "WARNING"}},
}

# The conversation store: SQLite under DATA_DIR unless DATABASE_URL names another database.
DATABASES = {
    "default": dj_database_url.parse(
        env_secret("DATABASE_URL", f"sqlite:///{DATA_DIR / 'db.sqlite3'}"), conn_max_age=0
    )
}
# PostgreSQL connections each web process keeps in its pool; 0: no pool.
DATABASE_POOL_SIZE = env_int("DATABASE_POOL_SIZE", 8, minimum=0)
# Which process this is: the web process (`python -m chatsite.daphne` says "web") reuses its
# database connections, the others (workers, commands) keep one per task.
PROCESS_ROLE = env_choice("CHATSITE_PROCESS", "other", {"web", "other"})
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory, so a separately started server process sees the test data.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}
    DATABASES["default"]["OPTIONS"] = {
        # Write-ahead log: readers never wait for the writer, and a commit is an append
        # without a sync (a power cut may lose the last commits, never corrupt the file).
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        # Take the write lock when a transaction begins, so a busy writer makes others
        # wait (up to `timeout` seconds) instead of failing mid-transaction.
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
if PROCESS_ROLE == "web":
    # Under ASGI each ORM call runs through sync_to_async and Django closes its connection after
    # it, so every call would open a new one.
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        # Kept open: opening one (the file, the WAL and synchronous pragmas) would run several
        # times an answer in the one thread that runs the chat's database calls, where a burst of
        # messages queues (`chat_turn_store_seconds`). An HTTP request's calls run in a thread of
        # their own that ends with it, and its connection with the thread.
        DATABASES["default"]["CONN_MAX_AGE"] = None
    elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DATABASE_POOL_SIZE:
        # From a pool, which saves a connection's set-up on every call. Django's pool (psycopg_pool)
        # checks a connection before lending it again, so connections the server dropped (a
        # restart, a failover) are replaced, not used. Only in the web process: the Celery workers
        # fork, and a pool must not be shared across a fork.
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": DATABASE_POOL_SIZE,
            # A request waits this long for a free connection, then fails with an error.
            "timeout": 10,
        }
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis, and Celery's broker on it. Without REDIS_URL, `make run` starts the bundled Redis
# (manage.py runredis) on this address, with the password kept in the data folder (made on first
# use, readable by its owner only).
REDIS_URL = env_secret("REDIS_URL") or (
    f"redis://:{private_secret(DATA_DIR / 'redis-password')}@127.0.0.1:6380/0"
)
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

# The engine (inference/, enginehost/). The launcher turns these into vLLM's flags; the web tier
# reads INFERENCE_URL, the served model name and the context length.
INFERENCE_URL = env_str("INFERENCE_URL", "http://127.0.0.1:8100")
INFERENCE_MODEL = env_str("INFERENCE_MODEL", str(DATA_DIR / "models" / "SmolLM2-135M-Instruct"))
INFERENCE_MODEL_NAME = env_str("INFERENCE_MODEL_NAME", "SmolLM2-135M-Instruct")
# Several models, each at its engine (or router): `name=url,name=url`, the default first. Empty:
# INFERENCE_MODEL_NAME at INFERENCE_URL alone.
INFERENCE_MODELS = env_str("INFERENCE_MODELS", "")
for _entry in filter(None, (entry.strip() for entry in INFERENCE_MODELS.split(","))):
    if not all(part.strip() for part in _entry.partition("=")[::2]) or "=" not in _entry:
        raise ImproperlyConfigured(f"INFERENCE_MODELS: expected name=url,name=url; got {_entry!r}")
INFERENCE_MAX_MODEL_LEN = env_int("INFERENCE_MAX_MODEL_LEN", 4096, minimum=256)
INFERENCE_MAX_NUM_SEQS = env_int("INFERENCE_MAX_NUM_SEQS", 64, minimum=1)
INFERENCE_MAX_NUM_BATCHED_TOKENS = env_int("INFERENCE_MAX_NUM_BATCHED_TOKENS", 4096, minimum=256)
INFERENCE_BLOCK_SIZE = env_int("INFERENCE_BLOCK_SIZE", 32, minimum=16)
INFERENCE_KV_CACHE_SPACE_GB = env_int("INFERENCE_KV_CACHE_SPACE_GB", 2, minimum=1)
INFERENCE_GPU_MEMORY_UTILIZATION = env_float(
    "INFERENCE_GPU_MEMORY_UTILIZATION", 0.9, minimum=0.05, maximum=1.0
)
# Graph capture speeds up decoding on a GPU, and compiling (torch.compile) on CPU, at the cost of a
# longer first start; later starts reuse torch's compile cache (the launcher).
INFERENCE_ENFORCE_EAGER = env_bool("INFERENCE_ENFORCE_EAGER", False)
# GPUs one engine spreads the model over (vLLM's --tensor-parallel-size).
INFERENCE_TENSOR_PARALLEL_SIZE = env_int("INFERENCE_TENSOR_PARALLEL_SIZE", 1, minimum=1)
INFERENCE_PREFIX_CACHING = env_bool("INFERENCE_PREFIX_CACHING", True)
INFERENCE_EXTRA_ARGS = env_str("INFERENCE_EXTRA_ARGS", "")
# The engine processes' niceness (0-19), which its workers inherit: above 0, the web tier's bursts
# of Python work run before the engine's threads where they share cores.
INFERENCE_NICE = env_int("INFERENCE_NICE", 0, minimum=0, maximum=19)
# Speculative decoding: "off" or "ngram" (vLLM's prompt lookup: drafts copied from the prompt,
# checked by the model in one step; no draft model).
INFERENCE_SPECULATIVE = env_choice("INFERENCE_SPECULATIVE", "off", {"off", "ngram"})
INFERENCE_SPECULATIVE_TOKENS = env_int("INFERENCE_SPECULATIVE_TOKENS", 4, minimum=1, maximum=16)
# Speculate only while at most this many sequences run; 0: at every batch size.
INFERENCE_SPECULATIVE_MAX_BATCH = env_int("INFERENCE_SPECULATIVE_MAX_BATCH", 0, minimum=0)
INFERENCE_STARTUP_TIMEOUT = env_float("INFERENCE_STARTUP_TIMEOUT", 600.0, minimum=1.0)
# Several engines on one host (`make run INFERENCE_REPLICAS=2`): vLLM's router (`runrouter`) answers
# at INFERENCE_URL and replica i (`runinference` with INFERENCE_REPLICA=i) at INFERENCE_URL's port + 1 + i.
INFERENCE_REPLICAS = env_int("INFERENCE_REPLICAS", 1, minimum=1, maximum=64)
# One engine alone is no replica: it serves at INFERENCE_URL itself. Bounded as it is read, since
# runinference starts without Django's system checks.
INFERENCE_REPLICA = env_int(
    "INFERENCE_REPLICA", -1, minimum=-1, maximum=INFERENCE_REPLICAS - 1 if INFERENCE_REPLICAS > 1 else -1
)
# How the router picks a replica; consistent_hash keys on the conversation (docs/deploy.md).
INFERENCE_ROUTER_POLICY = env_choice(
    "INFERENCE_ROUTER_POLICY",
    "consistent_hash",
    {"consistent_hash", "cache_aware", "round_robin", "power_of_two", "random"},
)
INFERENCE_ROUTER_METRICS_PORT = env_int("INFERENCE_ROUTER_METRICS_PORT", 29000, minimum=1, maximum=65535)
INFERENCE_CONNECT_TIMEOUT = env_float("INFERENCE_CONNECT_TIMEOUT", 5.0, minimum=0.1)
INFERENCE_TOKEN_TIMEOUT = env_float("INFERENCE_TOKEN_TIMEOUT", 60.0, minimum=0.1)
# The engine's API key: the launcher gives it to the engine's key guard (enginehost.keyguard);
# the router and every engine client send it. Empty: the engine asks none (it listens on this host
# only, docs/deploy.md).
INFERENCE_API_KEY = env_secret("INFERENCE_API_KEY")
# The circuit breaker in front of the engine (inference.breaker).
INFERENCE_BREAKER_FAILURES = env_int("INFERENCE_BREAKER_FAILURES", 5, minimum=1)
INFERENCE_BREAKER_COOL_DOWN = env_float("INFERENCE_BREAKER_COOL_DOWN", 10.0, minimum=0.1)

# The embedding engine (`runembeddings`, enginehost.embedlaunch; inference.embeddings is its client).
# It asks for INFERENCE_API_KEY as the chat engine does. Its runner: the product's own server on
# transformers, or vLLM's pooling runner, the faster of the two on a GPU (docs/benchmarks.md).
EMBEDDING_URL = env_str("EMBEDDING_URL", "http://127.0.0.1:8200")
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL", str(DATA_DIR / "models" / "all-MiniLM-L6-v2"))
EMBEDDING_MODEL_NAME = env_str("EMBEDDING_MODEL_NAME", "all-minilm-l6-v2")
EMBEDDING_RUNNER = env_choice(
    "EMBEDDING_RUNNER", "vllm" if shutil.which("nvidia-smi") else "transformers", {"transformers", "vllm"}
)
# The transformers runner's linear layers in int8 (enginehost.embedserver.quantized): 1.15-1.31x the
# float model's tokens/s on CPU, vectors at cosine 0.97 of its own on average, hybrid planted-fact
# recall@5 0.960 against 0.970 (docs/benchmarks.md, "Knowledge: embedding"). vLLM's runner ignores it.
EMBEDDING_QUANTIZE = env_bool("EMBEDDING_QUANTIZE", True)
# The vector's length; the launcher checks it against the model's own (its config's hidden_size).
EMBEDDING_DIMENSIONS = env_int("EMBEDDING_DIMENSIONS", 384, minimum=1)
# Tokens of a text the model reads; the rest is cut off (the default model was trained on 256).
EMBEDDING_MAX_TOKENS = env_int("EMBEDDING_MAX_TOKENS", 256, minimum=8)
# Texts per forward pass, and texts each lane (queries, bulk) may hold waiting before it refuses.
EMBEDDING_MAX_BATCH = env_int("EMBEDDING_MAX_BATCH", 32, minimum=1)
EMBEDDING_MAX_QUEUE = env_int("EMBEDDING_MAX_QUEUE", 4096, minimum=1)
# A request of at most this many texts, without a priority of its own, is a query: served first.
EMBEDDING_QUERY_TEXTS = env_int("EMBEDDING_QUERY_TEXTS", 4, minimum=1)
EMBEDDING_TIMEOUT = env_float("EMBEDDING_TIMEOUT", 120.0, minimum=0.1)
# The share of a GPU's memory vLLM's pooling runner takes; the chat engine's share
# (INFERENCE_GPU_MEMORY_UTILIZATION) must leave it room on a GPU they share.
EMBEDDING_GPU_MEMORY_UTILIZATION = env_float(
    "EMBEDDING_GPU_MEMORY_UTILIZATION", 0.05, minimum=0.01, maximum=1.0
)
# The embedding engine's niceness (0-19), as INFERENCE_NICE is the chat engine's. On the 2-core host no
# niceness (nor SCHED_IDLE) kept ingestion from slowing the chat engine's tokens (docs/benchmarks.md,
# section 11): KNOWLEDGE_EMBED_BATCH_WHILE_CHAT does.
EMBEDDING_NICE = env_int("EMBEDDING_NICE", 0, minimum=0, maximum=19)

# The chat (chat/, answers/, conversations/).
# What an answer is asked for.
CHAT_SYSTEM_PROMPT = env_str("CHAT_SYSTEM_PROMPT", "You are a helpful assistant.")
CHAT_MAX_TOKENS = env_int("CHAT_MAX_TOKENS", 512, minimum=1)
CHAT_TEMPERATURE = env_float("CHAT_TEMPERATURE", 0.7, minimum=0.0, maximum=2.0)
CHAT_PRIORITY = env_int("CHAT_PRIORITY", 0)
CHAT_MAX_CONTENT_CHARS = env_int("CHAT_MAX_CONTENT_CHARS", 16000, minimum=1)
# Per-user prefix-cache salt: one user's cached history never serves another's.
CHAT_CACHE_SALT_PER_USER = env_bool("CHAT_CACHE_SALT_PER_USER", True)
# What a conversation's settings may ask for, and the store API's page.
# Upper bound of a conversation's "max answer length" setting, in tokens.
CHAT_MAX_TOKENS_LIMIT = env_int("CHAT_MAX_TOKENS_LIMIT", 2048, minimum=1)
CHAT_SYSTEM_PROMPT_MAX_CHARS = env_int("CHAT_SYSTEM_PROMPT_MAX_CHARS", 4000, minimum=1)
# Conversations per page of /api/conversations/ unless ?page_size= asks for fewer or more (up to 100).
CHAT_API_PAGE_SIZE = env_int("CHAT_API_PAGE_SIZE", 20, minimum=1, maximum=100)
# An answer's deadlines.
CHAT_FIRST_TOKEN_TIMEOUT = env_float("CHAT_FIRST_TOKEN_TIMEOUT", 30.0, minimum=0.1)
CHAT_TOKEN_TIMEOUT = env_float("CHAT_TOKEN_TIMEOUT", 15.0, minimum=0.1)
CHAT_TOTAL_TIMEOUT = env_float("CHAT_TOTAL_TIMEOUT", 600.0, minimum=1.0)
# How long a chat answer whose engine went away waits for one to answer again (another replica, or the
# engine restarted: 40-106 s on a 2-core host), its deadlines paused, before it ends as interrupted.
CHAT_ENGINE_RESUME_SECONDS = env_float("CHAT_ENGINE_RESUME_SECONDS", 180.0, minimum=0.0)
# Bounded admission: past these a chat gets `busy` with a retry-after instead of a queue slot.
CHAT_MAX_ACTIVE_PER_USER = env_int("CHAT_MAX_ACTIVE_PER_USER", 3, minimum=1)
# The site's answers at once follow the engine's batch: more would queue inside the engine, where
# time to first token grows and nothing is gained (docs/benchmarks.md, "The knee").
CHAT_MAX_ACTIVE_TOTAL = env_int("CHAT_MAX_ACTIVE_TOTAL", INFERENCE_MAX_NUM_SEQS, minimum=1)
CHAT_MESSAGES_PER_MINUTE = env_int("CHAT_MESSAGES_PER_MINUTE", 20, minimum=1)
CHAT_SOCKET_FRAMES_PER_MINUTE = env_int("CHAT_SOCKET_FRAMES_PER_MINUTE", 120, minimum=1)
CHAT_MAX_SOCKETS_PER_USER = env_int("CHAT_MAX_SOCKETS_PER_USER", 20, minimum=1)
# How a logout or a user's change reaches the chat sockets of every web process: one Redis
# subscription a process (chat.sockets), or channels-redis's pub/sub channel layer, a channel of it
# a socket in two groups, which holds more a socket (docs/benchmarks.md, "Socket notices").
CHAT_SOCKET_NOTICES = env_choice("CHAT_SOCKET_NOTICES", "subscription", {"subscription", "layer"})
if CHAT_SOCKET_NOTICES == "layer":
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
CHAT_CONVERSATION_CHANGES_PER_MINUTE = env_int("CHAT_CONVERSATION_CHANGES_PER_MINUTE", 30, minimum=1)
CHAT_BUSY_RETRY_AFTER = env_float("CHAT_BUSY_RETRY_AFTER", 2.0, minimum=0.1)
# Attachments read at once (each in a child process of the web process, documents/).
CHAT_DOCUMENT_READS_PER_USER = env_int("CHAT_DOCUMENT_READS_PER_USER", 1, minimum=1)
CHAT_DOCUMENT_READS_PER_PROCESS = env_int("CHAT_DOCUMENT_READS_PER_PROCESS", 2, minimum=1)
# Answers outlive their process (answers/): a running answer refreshes its slot and heartbeat every
# CHAT_HEARTBEAT_SECONDS; another web process continues an answer whose heartbeat is
# CHAT_TAKEOVER_AFTER_SECONDS old, looking every CHAT_TAKEOVER_SCAN_SECONDS; a web process told to
# stop lets its answers finish for WEB_DRAIN_SECONDS, then hands them over; the sweeper ends an
# answer no process has owned for CHAT_STALE_AFTER_SECONDS.
CHAT_LEASE_SECONDS = env_float("CHAT_LEASE_SECONDS", 60.0, minimum=5.0)
CHAT_HEARTBEAT_SECONDS = env_float("CHAT_HEARTBEAT_SECONDS", 2.0, minimum=0.2)
CHAT_TAKEOVER_AFTER_SECONDS = env_float("CHAT_TAKEOVER_AFTER_SECONDS", 6.0, minimum=0.5)
CHAT_TAKEOVER_SCAN_SECONDS = env_float("CHAT_TAKEOVER_SCAN_SECONDS", 1.0, minimum=0.1)
WEB_DRAIN_SECONDS = web_drain_seconds()
# Meanwhile its idle sockets are closed this many a second (chat.sockets.send_away).
WEB_DRAIN_SOCKETS_PER_SECOND = env_float("WEB_DRAIN_SOCKETS_PER_SECOND", 200.0, minimum=1.0)
CHAT_STALE_AFTER_SECONDS = env_float("CHAT_STALE_AFTER_SECONDS", 60.0, minimum=5.0)
# An answer's frames in Redis (chat/streams.py).
CHAT_STREAM_MAX_ENTRIES = env_int("CHAT_STREAM_MAX_ENTRIES", 8192, minimum=64)
CHAT_STREAM_TTL_SECONDS = env_int("CHAT_STREAM_TTL_SECONDS", 3600, minimum=10)
CHAT_STREAM_BLOCK_SECONDS = env_float("CHAT_STREAM_BLOCK_SECONDS", 5.0, minimum=0.1)
# With CHAT_BUSY_FRAME_SECONDS above 0, while a web process's event loop runs CHAT_BUSY_LAG_SECONDS late
# or more, each of its answers sends at most one frame that often, carrying the tokens made meanwhile
# (answers.pacing): the bound on the latency that adds to a token. Off by default: on the load test's
# 600-user step it cut frames, not web CPU a token (docs/benchmarks.md, section 5).
CHAT_BUSY_LAG_SECONDS = env_float("CHAT_BUSY_LAG_SECONDS", 0.005, minimum=0.0)
CHAT_BUSY_FRAME_SECONDS = env_float("CHAT_BUSY_FRAME_SECONDS", 0.0, minimum=0.0, maximum=1.0)
# An answer that starts while its process is that late asks the engine for this many tokens an event
# (vLLM's stream_interval; its first and last tokens come at once): fewer events to read a token, at
# most this many tokens' time added to a token's wait. 1: an event a token, always.
CHAT_BUSY_STREAM_INTERVAL = env_int("CHAT_BUSY_STREAM_INTERVAL", 1, minimum=1, maximum=64)

# The web process's bound on waiting work (httpkit.pending): past WEB_MAX_PENDING handshakes and
# requests taken and not yet answered, the next is refused at once with `busy` (reason
# `web_pending`) and nothing read. 0: no bound. Its retry-after is the next free slot at half the
# rate the process takes work (httpkit.retryslots), 2 s away at the soonest, and not before the work
# already taken has left. Until this process has measured that rate it takes the one its fleet
# measured (kept in Redis); with none, a handshake's 4.2 ms of CPU (docs/benchmarks.md) gives a
# guess: about 200 a second.
WEB_MAX_PENDING = env_int("WEB_MAX_PENDING", 64, minimum=0)
WEB_PENDING_RETRY_FIRST = 2.0
WEB_PENDING_RATE_GUESS = 200.0

# The OpenAI-compatible API (openai_api/), its keys (apitokens/) and token quotas (usage/).
# Largest body of an OpenAI-API request: a whole conversation, sent on every turn.
API_MAX_REQUEST_BYTES = env_int("API_MAX_REQUEST_BYTES", 1024 * 1024, minimum=1024)
# Live API keys one user may hold (a session alone may make them).
API_KEYS_MAX_PER_USER = env_int("API_KEYS_MAX_PER_USER", 20, minimum=1)
# Daily token quota (prompt + completion, UTC days) of users with none of their own or their groups'; 0: none.
USAGE_DAILY_TOKENS = env_int("USAGE_DAILY_TOKENS", 0, minimum=0)

# Accounts that `make run` creates on first start. The well-known passwords are for
# development only: in production mode (DEBUG off) an unset password is a random one,
# printed once (and kept under DATA_DIR by `make run`), and a well-known one stops the
# process (accounts/checks.py).
DEFAULT_PASSWORDS = ("demo-password", "admin-password")
DEMO_USERNAME = env_str("DEMO_USERNAME", "demo")
DEMO_PASSWORD = env_secret("DEMO_PASSWORD", DEFAULT_PASSWORDS[0] if DEBUG else "")
STAFF_USERNAME = env_str("STAFF_USERNAME", "admin")
STAFF_PASSWORD = env_secret("STAFF_PASSWORD", DEFAULT_PASSWORDS[1] if DEBUG else "")

# Bulk summarization jobs (jobs/).
# Engine priority of bulk requests; chat uses CHAT_PRIORITY and lower numbers run first.
BULK_PRIORITY = env_int("BULK_PRIORITY", 10)
# Load shaping: bulk requests in flight per running job, between these bounds.
BULK_CONCURRENCY = env_int("BULK_CONCURRENCY", 8, minimum=1)
BULK_CONCURRENCY_MIN = env_int("BULK_CONCURRENCY_MIN", 1, minimum=1)
BULK_CONCURRENCY_WHILE_CHAT = env_int("BULK_CONCURRENCY_WHILE_CHAT", 1, minimum=0)
BULK_QUIET_SECONDS = env_float("BULK_QUIET_SECONDS", 3.0, minimum=0.0)
BULK_SHAPER_INTERVAL = env_float("BULK_SHAPER_INTERVAL", 0.25, minimum=0.05)
BULK_PREEMPT = env_bool("BULK_PREEMPT", True)
# Summaries.
BULK_TEMPERATURE = env_float("BULK_TEMPERATURE", 0.2, minimum=0.0, maximum=2.0)
BULK_SUMMARY_TOKENS = env_int("BULK_SUMMARY_TOKENS", 128, minimum=16)
BULK_MAX_SUMMARY_TOKENS = env_int("BULK_MAX_SUMMARY_TOKENS", 512, minimum=16)
BULK_CHUNK_TOKENS = env_int("BULK_CHUNK_TOKENS", 2048, minimum=128)
# Delivery: attempts per document, task time limits below the broker's visibility timeout.
BULK_MAX_ATTEMPTS = env_int("BULK_MAX_ATTEMPTS", 3, minimum=1)
BULK_RETRY_DELAY = env_float("BULK_RETRY_DELAY", 5.0, minimum=0.0)
BULK_TASK_SLICE_SECONDS = env_int("BULK_TASK_SLICE_SECONDS", 300, minimum=5)
BULK_TASK_SOFT_TIME_LIMIT = env_int("BULK_TASK_SOFT_TIME_LIMIT", 540, minimum=10)
BULK_TASK_TIME_LIMIT = env_int("BULK_TASK_TIME_LIMIT", 600, minimum=15)
BULK_VISIBILITY_TIMEOUT = env_int("BULK_VISIBILITY_TIMEOUT", 3600, minimum=20)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": BULK_VISIBILITY_TIMEOUT}
# Job tasks run for minutes: their own queue and worker (Procfile `bulk`), so they never hold
# the slots the chat's periodic tasks need.
CELERY_TASK_ROUTES = {"jobs.tasks.*": {"queue": "bulk"}}
# Input limits, enforced before content is held in memory.
BULK_MAX_UPLOAD_BYTES = env_int("BULK_MAX_UPLOAD_BYTES", 50 * 1024 * 1024, minimum=1)
BULK_MAX_FILE_BYTES = env_int("BULK_MAX_FILE_BYTES", 10 * 1024 * 1024, minimum=1)
BULK_MAX_DOCUMENTS = env_int("BULK_MAX_DOCUMENTS", 1000, minimum=1)
BULK_MAX_UNCOMPRESSED_BYTES = env_int("BULK_MAX_UNCOMPRESSED_BYTES", 100 * 1024 * 1024, minimum=1)
BULK_PDF_TIMEOUT = env_float("BULK_PDF_TIMEOUT", 30.0, minimum=1.0)
# CPU seconds one PDF's parse may use; below the wall clock, so a parser loop ends by it on a quiet host.
BULK_PDF_CPU_SECONDS = env_int("BULK_PDF_CPU_SECONDS", 20, minimum=1)
DATA_UPLOAD_MAX_NUMBER_FILES = BULK_MAX_DOCUMENTS

# Monitoring (monitoring/).
# Read by prometheus_client itself at import; set it before the process starts to
# aggregate the metrics of several processes (docs/monitoring.md).
PROMETHEUS_MULTIPROC_DIR = env_str("PROMETHEUS_MULTIPROC_DIR", "")
# When set, /metrics asks for `Authorization: Bearer <token>`.
MONITORING_METRICS_TOKEN = env_secret("MONITORING_METRICS_TOKEN")
MONITORING_WINDOW_SECONDS = env_float("MONITORING_WINDOW_SECONDS", 60.0, minimum=1.0)
MONITORING_REFRESH_SECONDS = env_float("MONITORING_REFRESH_SECONDS", 2.0, minimum=0.2)
# The dashboard's history: a point every this many seconds (monitoring.history).
MONITORING_HISTORY_SAMPLE_SECONDS = 10.0

# Celery beat's periodic tasks: the chat's stale-answer sweep and the dashboard's history.
CELERY_BEAT_SCHEDULE = {
    "sweep-stale-answers": {
        "task": "chat.tasks.sweep_stale_answers",
        "schedule": CHAT_STALE_AFTER_SECONDS / 2,
    },
    "monitoring-history": {
        "task": "monitoring.tasks.record_history",
        "schedule": MONITORING_HISTORY_SAMPLE_SECONDS,
        "options": {"expires": MONITORING_HISTORY_SAMPLE_SECONDS},
    },
}

# Security (production mode, cookies, CSP, login throttling).
# docs/security.md explains each choice. Production mode is DEBUG off: it refuses to start
# without a real secret key and an explicit host list, and turns on TLS-only cookies, HSTS
# and the HTTPS redirect unless the environment says otherwise. The refusals are here, not in
# system checks, so every process meets them: daphne and the Celery workers run no checks.
if not DEBUG:
    if SECRET_KEY == _DEV_SECRET_KEY or len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
        raise ImproperlyConfigured(
            "DEBUG is off, so SECRET_KEY must be set to a random value of at least 50 characters "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'), or SECRET_KEY_FILE "
            "to a file that holds one (make run makes DATA_DIR/secret-key), or DEBUG=true for "
            "development (make dev and make test set it)."
        )
    # A bearer token for /metrics and health details; a placeholder or a short one is no secret.
    if MONITORING_METRICS_TOKEN and (
        len(MONITORING_METRICS_TOKEN) < 32
        or len(set(MONITORING_METRICS_TOKEN)) < 5
        or "REPLACE" in MONITORING_METRICS_TOKEN.upper()
    ):
        raise ImproperlyConfigured(
            "DEBUG is off, so MONITORING_METRICS_TOKEN, when set, must be a random value of at least "
            "32 characters, not a placeholder (python -c 'import secrets; print(secrets.token_urlsafe(32))')."
        )
    if not env_list("ALLOWED_HOSTS", []):
        raise ImproperlyConfigured(
            "DEBUG is off, so ALLOWED_HOSTS must name the host names this site is served under "
            "(comma-separated), e.g. ALLOWED_HOSTS=chat.example.com, or DEBUG=true for development."
        )
# Cookies: the session cookie is HttpOnly (Django's default); the CSRF cookie is read by the
# chat's script to send X-CSRFToken, so it cannot be HttpOnly (it guards nothing by being secret).
SESSION_ENGINE = "accounts.sessions"  # Django's database sessions, keeping the expiry they read
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = env_choice("SESSION_COOKIE_SAMESITE", "Lax", {"Lax", "Strict"})
CSRF_COOKIE_SAMESITE = SESSION_COOKIE_SAMESITE
SECURE_COOKIES = env_bool("SECURE_COOKIES", not DEBUG)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_COOKIES
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Behind a TLS-terminating proxy, name the header it sets (e.g. X-Forwarded-Proto) so Django
# knows a request came over HTTPS; only do so when the proxy overwrites that header.
_PROXY_SSL_HEADER = env_str("SECURE_PROXY_SSL_HEADER", "")
if _PROXY_SSL_HEADER:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _PROXY_SSL_HEADER.upper().replace("-", "_"), "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
# Health checks and Prometheus scrapes come from inside the deployment, over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz(/live|/ready)?$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy on every response (django-csp): scripts and styles only from this
# site's static files, no inline script or event handler, no plugins, no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}
# Login throttling (accounts/): attempts counted in Redis over a moving window.
LOGIN_FAILURES_PER_USERNAME = env_int("LOGIN_FAILURES_PER_USERNAME", 5, minimum=1)
LOGIN_FAILURES_PER_IP = env_int("LOGIN_FAILURES_PER_IP", 20, minimum=1)
LOGIN_THROTTLE_SECONDS = env_int("LOGIN_THROTTLE_SECONDS", 300, minimum=1)
# Addresses or networks of the reverse proxies whose X-Forwarded-For is believed; from any
# other peer the header is ignored. A malformed one (a placeholder left in) stops the process:
# believing the header from the wrong peers lets a client reset its own login throttle.
TRUSTED_PROXIES = env_list("TRUSTED_PROXIES", [])
for _proxy in TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"TRUSTED_PROXIES: {_proxy!r} is not an address or a network (the ingress controller's "
            "pod addresses, docs/deploy.md)"
        ) from None

# Single sign-on (sso/, docs/configuration.md "Single sign-on"): OpenID Connect providers from
# SSO_OIDC_PROVIDERS and their SSO_OIDC_<ID>_* variables (chatsite/signon.py), SAML 2.0 providers from
# SSO_SAML_PROVIDERS and their SSO_SAML_<ID>_* variables (chatsite/signon_saml.py), through django-allauth.
# Provider group name -> Django group name, for every provider without a map of its own.
SSO_GROUP_MAP = signon.group_map("SSO_GROUP_MAP", {})
# Django groups whose members are staff (bulk jobs, the admin); staff status a sign-in gave goes
# with the last of them.
SSO_STAFF_GROUPS = env_list("SSO_STAFF_GROUPS", [])
# Every provider by its id: protocol ("oidc" or "saml"), name, groups claim, group map, ...
SSO_PROVIDERS, _OIDC_APPS = signon.oidc_providers(SSO_GROUP_MAP)
_SAML_PROVIDERS, _SAML_APPS = signon_saml.saml_providers(SSO_GROUP_MAP)
if _both := sorted(set(SSO_PROVIDERS) & set(_SAML_PROVIDERS)):
    raise ImproperlyConfigured(
        f"SSO_OIDC_PROVIDERS and SSO_SAML_PROVIDERS both name {_both}: ids are one namespace"
    )
SSO_PROVIDERS.update(_SAML_PROVIDERS)
# Local passwords off for everyone but the break-glass staff account (sso.backends).
SSO_ONLY = env_bool("SSO_ONLY", False)
SSO_BREAK_GLASS_USER = env_str("SSO_BREAK_GLASS_USER", "")
# Seconds a provider's sign-in lasts at most; then the provider is asked again.
SSO_SESSION_MAX_AGE = env_int("SSO_SESSION_MAX_AGE", 8 * 3600, minimum=60)
# Seconds an SSO user's API keys keep working without a sign-in (apitokens.auth); 0: forever.
SSO_KEY_MAX_IDLE = env_int("SSO_KEY_MAX_IDLE", 30 * 24 * 3600, minimum=0)
AUTHENTICATION_BACKENDS = ["sso.backends.PasswordBackend"]
SOCIALACCOUNT_ADAPTER = "sso.adapter.SocialAccountAdapter"
SOCIALACCOUNT_PROVIDERS = {
    "openid_connect": {
        "provider_class": "sso.oidc.StrictProvider",
        "OAUTH_PKCE_ENABLED": True,
        "APPS": _OIDC_APPS,
    },
    "saml": {"provider_class": "sso.saml.StrictSAMLProvider", "APPS": _SAML_APPS},
}
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_LOGIN_ON_GET = False
SOCIALACCOUNT_STORE_TOKENS = False
# Accounts link by a provider's verified e-mail in sso.adapter only, never by allauth's own rule.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_SIGNUP_FIELDS = ["username*", "email"]
ACCOUNT_UNIQUE_EMAIL = False
# A sign-in form posts here, then the browser is sent on to the provider: the provider's origin
# must be a form's allowed target too.
CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"] += sorted(
    {signon.origin(provider["server_url"]) for provider in SSO_PROVIDERS.values() if "server_url" in provider}
    | {provider["sso_origin"] for provider in SSO_PROVIDERS.values() if "sso_origin" in provider}
)

# Knowledge: collections, their indexing and retrieval (knowledge/, docs/knowledge.md); the embedding
# engine they use is configured with the engine above.
# Passages: tokens of the embedding model each, and how many each shares with the one before.
KNOWLEDGE_CHUNK_TOKENS = env_int("KNOWLEDGE_CHUNK_TOKENS", 200, minimum=16, maximum=510)
KNOWLEDGE_CHUNK_OVERLAP = env_int("KNOWLEDGE_CHUNK_OVERLAP", 40, minimum=0)
# A passage's windows: its sentences, at most this many tokens each, embedded beside it (0: none).
KNOWLEDGE_WINDOW_TOKENS = env_int("KNOWLEDGE_WINDOW_TOKENS", 64, minimum=0, maximum=510)
# Texts (passages and their windows) embedded and stored together, sent longest first in one request;
# requests of fewer while chat answers stream, or none: where the chat engine shares the CPU with the
# embedding engine, any embedding beside it slowed its tokens about 3x whatever its priority, so there
# indexing waits for chat to end (docs/benchmarks.md, section 11).
KNOWLEDGE_EMBED_BATCH = env_int("KNOWLEDGE_EMBED_BATCH", 512, minimum=1)
# Documents one indexing run reads, cuts and embeds at once: their requests meet in the embedding engine's
# forward passes, which one short document's texts alone leave mostly empty.
KNOWLEDGE_INDEX_DOCUMENTS = env_int("KNOWLEDGE_INDEX_DOCUMENTS", 4, minimum=1, maximum=64)
KNOWLEDGE_EMBED_BATCH_WHILE_CHAT = env_int(
    "KNOWLEDGE_EMBED_BATCH_WHILE_CHAT", 8 if shutil.which("nvidia-smi") else 0, minimum=0
)
# The longest indexing waits for chat to end (KNOWLEDGE_EMBED_BATCH_WHILE_CHAT 0) before a request of 8
# texts goes anyway: a site whose chat never rests still indexes.
KNOWLEDGE_CHAT_WAIT_SECONDS = env_float("KNOWLEDGE_CHAT_WAIT_SECONDS", 60.0, minimum=0.0)
KNOWLEDGE_MAX_ATTEMPTS = env_int("KNOWLEDGE_MAX_ATTEMPTS", 3, minimum=1)
KNOWLEDGE_LEASE_SECONDS = env_int("KNOWLEDGE_LEASE_SECONDS", 120, minimum=10)
# Retrieval: passages a question gets, candidates each search ranks before they are fused, the
# vector similarity below which a passage is not a match, reciprocal rank fusion's constant.
KNOWLEDGE_TOP_K = env_int("KNOWLEDGE_TOP_K", 5, minimum=1, maximum=50)
KNOWLEDGE_CANDIDATES = env_int("KNOWLEDGE_CANDIDATES", 200, minimum=1, maximum=1000)
KNOWLEDGE_MIN_SCORE = env_float("KNOWLEDGE_MIN_SCORE", 0.1, minimum=-1.0, maximum=1.0)
KNOWLEDGE_RRF_K = env_int("KNOWLEDGE_RRF_K", 60, minimum=1)
# pgvector's HNSW search width (hnsw.ef_search): recall against time.
KNOWLEDGE_HNSW_EF_SEARCH = env_int("KNOWLEDGE_HNSW_EF_SEARCH", 100, minimum=1, maximum=1000)
# Passages PostgreSQL's full-text search ranks for one question at most: those holding its rarest words.
KNOWLEDGE_FTS_RANKED = env_int("KNOWLEDGE_FTS_RANKED", 2000, minimum=1)
# PostgreSQL's text search configuration for passages and questions.
KNOWLEDGE_FTS_CONFIG = env_choice(
    "KNOWLEDGE_FTS_CONFIG",
    "english",
    {"simple", "danish", "dutch", "english", "finnish", "french", "german", "hungarian", "italian",
     "norwegian", "portuguese", "romanian", "russian", "spanish", "swedish", "turkish"},
)  # fmt: skip
# Prompt tokens the quoted passages of one conversation may take, leaving the rest to its history.
KNOWLEDGE_PASSAGE_TOKENS = env_int("KNOWLEDGE_PASSAGE_TOKENS", 1500, minimum=100)
# Each user's storage: documents and bytes across their collections.
KNOWLEDGE_MAX_DOCUMENTS_PER_USER = env_int("KNOWLEDGE_MAX_DOCUMENTS_PER_USER", 10000, minimum=1)
KNOWLEDGE_MAX_BYTES_PER_USER = env_int("KNOWLEDGE_MAX_BYTES_PER_USER", 1024 * 1024 * 1024, minimum=1)
# Each user's uploads to collections and searches of them (the page's and the API's) per minute.
KNOWLEDGE_UPLOADS_PER_MINUTE = env_int("KNOWLEDGE_UPLOADS_PER_MINUTE", 30, minimum=1)
KNOWLEDGE_SEARCHES_PER_MINUTE = env_int("KNOWLEDGE_SEARCHES_PER_MINUTE", 60, minimum=1)
CELERY_TASK_ROUTES["knowledge.tasks.*"] = {"queue": "bulk"}
# Documents left pending by a lost task (a killed worker, a Redis restart) are queued again.
KNOWLEDGE_SWEEP_SECONDS = env_float("KNOWLEDGE_SWEEP_SECONDS", 60.0, minimum=1.0)
CELERY_BEAT_SCHEDULE["knowledge-sweep"] = {
    "task": "knowledge.tasks.knowledge_sweep",
    "schedule": KNOWLEDGE_SWEEP_SECONDS,
    "options": {"expires": KNOWLEDGE_SWEEP_SECONDS},
}

# The OpenAI Batch API (batches/): files uploaded for batches and the batches run as bulk jobs.
# Where files are kept: on disk, streamed in and out (every web process and bulk worker reads it).
BATCH_FILES_DIR = Path(env_str("BATCH_FILES_DIR", str(DATA_DIR / "batch-files")))
# One file's bytes (refused past it, 413) and the requests one batch's file may hold.
BATCH_FILE_MAX_BYTES = env_int("BATCH_FILE_MAX_BYTES", 200 * 1024 * 1024, minimum=1024)
BATCH_MAX_REQUESTS = env_int("BATCH_MAX_REQUESTS", 50000, minimum=1)
# The most lines one batch keeps in flight while chat is quiet (BULK_CONCURRENCY is the summary
# jobs'); chat still drops it to BULK_CONCURRENCY_WHILE_CHAT at once. The engine's batch limit by default.
BATCH_CONCURRENCY = env_int("BATCH_CONCURRENCY", 64, minimum=1)
# Files whose expiry (`expires_after`) has passed, and batches past their completion window, are
# swept this often.
BATCH_SWEEP_SECONDS = env_float("BATCH_SWEEP_SECONDS", 300.0, minimum=1.0)
CELERY_TASK_ROUTES["batches.tasks.*"] = {"queue": "bulk"}
CELERY_BEAT_SCHEDULE["batches-sweep"] = {
    "task": "batches.tasks.batches_sweep",
    "schedule": BATCH_SWEEP_SECONDS,
    "options": {"expires": BATCH_SWEEP_SECONDS},
}
