# Two commands for a newcomer: `make run` and `make test`. Both set everything up first.
# Every target and variable is listed in docs/reference.md (make docs-reference).

# PYTHON is the interpreter the virtualenv is built from (3.10 to 3.13). Named on the command
# line or in the environment, it must be the one that built an existing $(VENV): make stops and
# names both rather than run the suite on another Python. `make test-python PYTHON=python3.10`
# runs the core suite in a virtualenv of that Python's own, .venv-3.10, and leaves .venv alone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Wheels of the project's dependencies with PySpark's thin client (pyspark-client) in place of
# the full PySpark, for the test that installs the project into a new virtualenv beside it
# with no download (tests/launcher/test_thin_client.py).
WHEELHOUSE := $(VENV)/wheelhouse
WHEELHOUSE_STAMP := $(WHEELHOUSE)/.filled
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-k sessions -x"`.
PYTEST_ARGS ?=
# Test processes (pytest-xdist, idle processes take work from busy ones). The suite mostly waits
# on Spark and Kafka: two processes cut the first pass from 21 to 14 min on a 2-core machine.
# loadgroup: the tests of one xdist_group (the Spark cluster tests) share one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup
# Options for `make run` (python -m pipelines.live), e.g. `make run RUN_ARGS="--rate 50"`.
RUN_ARGS ?=
# Seconds `make run` streams after Spark's first micro-batch, e.g. `make run DURATION=20`.
DURATION ?= 60
# Options for the benchmarks, e.g. `make bench BENCH_ARGS="--events 1000000"`.
BENCH_ARGS ?=
# Where `make spark-cluster` keeps the standalone cluster's URL and PIDs, and its workers:
# `make spark-cluster WORKERS=2` starts two, each with its own work and local directories.
CLUSTER_DIR ?= .spark-cluster
# Workers of `make spark-cluster`.
WORKERS ?= 1
# Cores of each worker of `make spark-cluster`.
WORKER_CORES ?= 2
# The embedded Kafka-protocol broker for `make kafka` (noida or tansu). The tests run every
# Kafka test on both, in one session; KAFKA_BROKER=noida make test keeps one.
KAFKA_BROKER ?= noida
# Where `make kafka` keeps the broker's address, PID, log and data.
KAFKA_DIR ?= .kafka-broker
# Where `make connect-server` keeps its Spark Connect server's URL, PID and log, and its master.
CONNECT_DIR ?= .spark-connect
# The master of `make connect-server`'s server (a cluster's spark:// URL serves that cluster).
CONNECT_MASTER ?= local[2]

.PHONY: install wheelhouse test-library check-java check-python test test-python test-all test-extended test-kafka test-connect test-faults test-beam-suite test-docs docs-reference run bench bench-full bench-large bench-streaming bench-teststream bench-kafka spark-cluster spark-cluster-stop \
        spark-cluster-status connect-server connect-server-stop connect-server-status kafka kafka-stop kafka-status job-server graphviz clean

# Sets up .venv: the project (editable) with its test and demo extras, and .venv/wheelhouse;
# again only when setup.py changes. Every target that runs something depends on it.
install: check-java check-python $(STAMP) $(WHEELHOUSE_STAMP)

# Re-installs only when the declared dependencies change, so `make test` is quick when set up.
# The test extra brings the full PySpark (the spark extra).
$(STAMP): setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[test,demo]'
	@touch $(STAMP)

# With the default PYTHON, an existing $(VENV) is used whatever built it (as always). With PYTHON
# named, a $(VENV) built from another major.minor stops make: rebuilding it would silently
# throw away an environment that another command may be using, reusing it would test the
# wrong Python.
check-python:
ifneq ($(filter command line environment environment override,$(origin PYTHON)),)
	@wanted=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])') || { \
	  echo "PYTHON=$(PYTHON) does not run: name a Python interpreter on PATH or its full path."; \
	  exit 1; }; \
	if [ -x $(PY) ]; then \
	  built=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	  if [ "$$built" != "$$wanted" ]; then \
	    echo "$(VENV) was built from Python $$built ($$($(PY) -c 'import sys; print(sys.base_prefix)')),"; \
	    echo "but PYTHON=$(PYTHON) is Python $$wanted ($$(command -v $(PYTHON)))."; \
	    echo "Run the suite in a virtualenv of its own:  make test-python PYTHON=$(PYTHON)   (.venv-$$wanted)"; \
	    echo "or rebuild $(VENV) from it:                rm -rf $(VENV) && make test PYTHON=$(PYTHON)"; \
	    exit 1; \
	  fi; \
	fi
endif

# Wheels of the project's dependencies beside PySpark's thin client, in .venv/wheelhouse.
wheelhouse: $(WHEELHOUSE_STAMP)

$(WHEELHOUSE_STAMP): setup.py | $(STAMP)
	$(PY) -m pip wheel --quiet --wheel-dir $(WHEELHOUSE) '.[connect]'
	rm -f $(WHEELHOUSE)/beam_spark_dataflow-*.whl
	@touch $@

# Stops with how to install Java when Spark's Java 17+ is missing.
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

# The core suite (tests/suite_scope.py): within 15 minutes on a fresh clone of a 2-core
# machine. Left out, each in a target below: Kafka tests on the second broker, Spark Connect
# and DirectRunner runs outside tests/model, and the slow, rarely broken tests it names.
test: install
	BEAM_TEST_SCOPE=core $(PYTEST) $(PYTEST_ARGS)

# The core suite on another Python, in a virtualenv of its own built from it (.venv-3.10 for
# `make test-python PYTHON=python3.10`), made on first use and kept; .venv is left as it is.
# PYTEST_ARGS and TEST_WORKERS apply as for make test.
test-python:
	@version=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])') || { \
	  echo "PYTHON=$(PYTHON) does not run: name a Python interpreter, e.g." \
	    "make test-python PYTHON=python3.10"; \
	  exit 1; }; \
	$(MAKE) --no-print-directory test PYTHON='$(PYTHON)' VENV=.venv-$$version

# The library path, as a user takes it: the project's wheel installed (not editable) with its
# spark extra into a new virtualenv, then, from a folder outside the repository, an example
# pipeline through the launcher on Spark and a TestStream test through the testing kit
# (.ci/library_path.sh; CI runs it after make test).
test-library: install
	bash .ci/library_path.sh

# Every test (make test and what it leaves out); each Kafka test once per embedded broker.
test-all: install
	BEAM_TEST_SCOPE=all $(PYTEST) $(PYTEST_ARGS)

# Only what make test leaves out (marker `extended`).
test-extended: install
	BEAM_TEST_SCOPE=all $(PYTEST) -m extended $(PYTEST_ARGS)

# The Kafka tests alone, once per broker.
test-kafka: install
	BEAM_TEST_SCOPE=all $(PYTEST) -m kafka $(PYTEST_ARGS)

# The tests on Spark Connect alone: every batch test of the model, the runner and the jobs on
# a Connect server, and the Connect-specific ones.
test-connect: install
	BEAM_TEST_SCOPE=all $(PYTEST) -k "SparkConnect or connect" $(PYTEST_ARGS)

# The fault tests alone: a worker, a driver or a broker killed or restarted (marker `faults`).
test-faults: install
	BEAM_TEST_SCOPE=all $(PYTEST) -m faults $(PYTEST_ARGS)

# Arguments of tests/beam_suite/run.py, e.g. "--runners classic -- -k Quantiles".
BEAM_SUITE_ARGS ?=
# Beam's own tests of text and file IO, the DataFrame API, RunInference, Deduplicate,
# PeriodicImpulse and approximate statistics, on the DirectRunner, our runner on classic Spark
# and through Spark Connect, one runner at a time (long: not in make test). Prints the counts
# per file and runner and each test passing on the DirectRunner and failing on ours; reports
# in out/beam-suite/. E.g. make test-beam-suite BEAM_SUITE_ARGS="--runners classic -- -k Quantiles"
test-beam-suite: install
	$(PY) -m pip install --quiet -e '.[beam-suite]'
	nice -n 5 $(PY) tests/beam_suite/run.py $(BEAM_SUITE_ARGS)

# The documentation's checks and examples (tests/docs): links, anchors, images, the reference,
# the test names the pages cite and the quick examples, which make test runs too; and the slow
# examples (make run, a Spark cluster, a Spark Connect server, Kafka: several minutes).
test-docs: install
	BEAM_TEST_SCOPE=all $(PYTEST) tests/docs $(PYTEST_ARGS)

# Regenerates docs/reference.md (every option, command and make target) from the code; make
# test fails until the page matches the code.
docs-reference: install
	$(PY) tests/docs/doc_reference.py

# The live demo: embedded Kafka, a producer of game events, team_scores on the SparkRunner in
# streaming, a live leaderboard; then a summary and out/live.png, out/live-throughput.png.
run: install
	$(PY) -m pipelines.live --duration $(DURATION) --plot out/live.png $(RUN_ARGS)

# The batch benchmarks (python -m bench): 1e5 events, every engine, answers checked.
bench: install
	$(PY) -m bench $(BENCH_ARGS)

# The same with 1e6 events.
bench-full: install
	$(PY) -m bench --events 1000000 $(BENCH_ARGS)

# 10M events, on Spark's defaults (local[2]: one JVM with the default 1g heap): the keyed
# windowed sum, and a GroupByKey whose hot key holds 5M values (spills, must not fail).
bench-large: install
	$(PY) -m bench --events 10000000 --warmup-events 0 --only spark,pyspark \
	  --workloads keyed_windowed_sum,hot_key_group $(BENCH_ARGS)

# Streaming: sustained events/s and per-batch latency of a keyed windowed sum on local[2].
bench-streaming: install
	$(PY) -m bench.streaming $(BENCH_ARGS)

# TestStream pipelines (the model tests' shapes, and Beam's own transcript tests) on our
# SparkRunner and the DirectRunner: seconds per pipeline, and what a round holding little costs.
bench-teststream: install
	$(PY) -m bench.teststream $(BENCH_ARGS)

# Kafka -> team scores -> Kafka on the SparkRunner (streaming, local[2], embedded broker):
# sustained records/s and end-to-end latency at fixed produce rates.
bench-kafka: install
	$(PY) -m bench.kafka $(BENCH_ARGS)

# A Spark standalone master and $(WORKERS) worker(s) on 127.0.0.1 (free ports), from pyspark's
# own Spark distribution; prints the spark:// URL to pass as --spark_master_url. The services'
# targets run the launcher's commands (beam-spark --help); the stop targets run the modules
# themselves, which a virtualenv installed before the launcher has too.
spark-cluster: install
	$(PY) -m beam_spark cluster start --state-dir $(CLUSTER_DIR) --workers $(WORKERS) \
	  --worker-cores $(WORKER_CORES)

# Stops the cluster make spark-cluster started (by its PIDs).
spark-cluster-stop:
	@if [ -x $(PY) ]; then $(PY) -m services.cluster stop --state-dir $(CLUSTER_DIR); fi

# Shows the cluster make spark-cluster started.
spark-cluster-status:
	$(PY) -m beam_spark cluster status --state-dir $(CLUSTER_DIR)

# A Spark Connect server on 127.0.0.1 (free port), from pyspark's own jars; prints the sc:// URL
# to pass as --spark_remote. CONNECT_MASTER=spark://... serves a cluster.
connect-server: install
	$(PY) -m beam_spark connect-server start --state-dir $(CONNECT_DIR) --master '$(CONNECT_MASTER)'

# Stops the server make connect-server started (by its PID).
connect-server-stop:
	@if [ -x $(PY) ]; then $(PY) -m services.connect_server stop --state-dir $(CONNECT_DIR); fi

# Shows the server make connect-server started.
connect-server-status:
	$(PY) -m beam_spark connect-server status --state-dir $(CONNECT_DIR)

# The port of make job-server.
JOB_SERVER_PORT ?= 8099
# More options of make job-server, e.g. "--spark_remote sc://HOST:15002".
JOB_SERVER_ARGS ?=
# Beam's Job API on Spark: submit any Beam Python pipeline with --runner=PortableRunner
# --job_endpoint=localhost:$(JOB_SERVER_PORT). Stop it with Ctrl-C.
job-server: install
	$(PY) -m beam_spark job-server --port $(JOB_SERVER_PORT) $(JOB_SERVER_ARGS)

# Optional: Graphviz renders `--graph FILE.svg|.png` (without it, jobs write FILE.dot).
graphviz:
	@command -v dot >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq graphviz; } \
	  || echo "Install Graphviz yourself: sudo apt-get install -y graphviz (Debian/Ubuntu)"

# The embedded broker for manual use: prints the --bootstrap_servers to pass to a job.
kafka: install
	$(PY) -m beam_spark kafka start --kind $(KAFKA_BROKER) --state-dir $(KAFKA_DIR)

# Stops the broker make kafka started (by its PID).
kafka-stop:
	@if [ -x $(PY) ]; then $(PY) -m services.broker stop --state-dir $(KAFKA_DIR); fi

# Shows the broker make kafka started.
kafka-status:
	$(PY) -m beam_spark kafka status --state-dir $(KAFKA_DIR)

# Stops the local services and removes .venv, .venv-3.*, out/ and the services' folders.
clean: spark-cluster-stop connect-server-stop kafka-stop
	rm -rf $(VENV) .venv-3.* build *.egg-info .pytest_cache out $(CLUSTER_DIR) $(CONNECT_DIR) $(KAFKA_DIR)
