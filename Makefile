# One command for each thing a person does on a fresh machine. See README.md.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup test test-stack test-containers kafka-image runtime-image unit check stack-up stack-down demo bench-quick clean

# A virtual environment with the package and its dev tools. pip's cache keeps torch (large)
# from being downloaded twice; the stamp keeps a second `make` from reinstalling at all.
setup: $(STAMP)
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed: set PYTHON=python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar off -e '.[dev]'
	@echo "compiling the act and the chunker's step (numba, ~30 s; cached in their __pycache__)"
	$(BIN)/python -m coach_stream.rollout.compiled
	touch $(STAMP)

# The whole suite against real services: first against the local stack (started if it is
# not running, stopped afterwards only if this command started it), then the Kafka suites
# against testcontainers Kafka (those suites, scripts/kafka-suites.txt, run only there). Both
# halves run even when the first fails.
test: setup
	@status=0; \
	bash scripts/with-stack.sh bash scripts/test-lanes.sh all --kafka-suites-elsewhere || status=$$?; \
	bash scripts/test-containers.sh || status=$$?; \
	exit $$status

# The first half of `make test` alone: the whole suite against the local stack, its fast
# lane on both cores, then the rest one at a time (scripts/test-lanes.sh).
test-stack: setup
	bash scripts/with-stack.sh bash scripts/test-lanes.sh all

# The Kafka integration suites against testcontainers Kafka, and Nomad's docker driver
# (docs/testing.md): uses the engine at DOCKER_HOST, or installs/starts the project's own and
# stops it afterwards; builds or reuses the offline images coach-stream/kafka:4.4.0 and
# coach-stream/runtime:0.1.0.
test-containers: setup
	bash scripts/test-containers.sh

# The offline-built Kafka image alone (cached: seconds when nothing changed).
kafka-image: setup
	bash scripts/build-kafka-image.sh

# The image Nomad's docker driver runs, built offline as the Dockerfile's twin (cached).
runtime-image: setup
	bash scripts/build-runtime-image.sh

# The fast lane: every test that needs no Kafka, GCS or Docker (unit, fuzz, the Nomad
# double's own tests, the CLI's bad-input cases), on both cores; under 2 minutes.
unit: setup
	bash scripts/test-lanes.sh fast -m "not integration"

check: setup
	$(BIN)/ruff check coach_stream tests bench
	$(BIN)/ruff format --check coach_stream tests bench
	$(BIN)/mypy coach_stream

stack-up: setup
	$(BIN)/coach-stream stack up

stack-down:
	$(BIN)/coach-stream stack down

# The main job: a real distributed run on the local stack.
demo: setup
	bash scripts/with-stack.sh bash scripts/demo.sh

bench-quick: setup
	bash scripts/with-stack.sh bash -c 'for b in bench/*.py; do $(BIN)/python $$b --quick; done'

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
