# Two commands for a newcomer: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-k sessions -x"`.
PYTEST_ARGS ?=
# Options for the main job run by `make run`, e.g. `make run RUN_ARGS="--runner=SparkRunner"`.
RUN_ARGS ?=

.PHONY: install check-java test run bench clean

install: check-java $(STAMP)

# Re-installs only when the declared dependencies change, so `make test` is quick when set up.
$(STAMP): setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test,demo]'
	@touch $(STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "Java 17 or newer is required by Spark and was not found."; \
	  echo "Install it with:  sudo apt-get install -y openjdk-17-jre-headless   (Debian/Ubuntu)"; \
	  echo "              or: brew install openjdk@17                            (macOS)"; \
	  exit 1; }
	@version=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1); \
	if [ -z "$$version" ] || [ "$$version" -lt 17 ]; then \
	  echo "Java 17 or newer is required by Spark; found: $$(java -version 2>&1 | head -n 1)"; \
	  echo "Install it with:  sudo apt-get install -y openjdk-17-jre-headless   (Debian/Ubuntu)"; \
	  exit 1; \
	fi

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

run: install
	$(PY) -m pipelines.team_scores $(RUN_ARGS)

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache out
