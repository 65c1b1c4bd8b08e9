# Millrace: the make targets other parts and users rely on (see ../shared/DESIGN.md, section 3).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DIR    ?= run/cluster
BROKERS ?= 1

.PHONY: setup net-tools browser bytecode test test-unit fault lint format demo bench bench-quick cluster-up cluster-down clean

JVM    := .cache/jvm
JVM_STAMP := $(JVM)/.fetched
KAFKA_CLIENTS_3 := 3.9.1

setup: $(STAMP) $(JVM_STAMP) net-tools browser bytecode

# The fault harness (tests/fault) cuts links inside network namespaces of its own with
# iptables: installed from Debian's packages when missing (root and apt-get needed; without
# them the fault harness skips and says why).
net-tools:
	@command -v iptables >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing iptables for the fault harness"; \
	    apt-get install -y -q iptables >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q iptables >/dev/null 2>&1; } || \
	    echo "could not install iptables: the fault harness will skip"; \
	  else echo "iptables missing (needs root and apt-get): the fault harness will skip"; fi; }

# The web console's tests (tests/console) drive a headless Chromium through chromium-driver,
# both from Debian's packages, installed when missing as iptables is (Selenium is given the
# driver's path, so nothing is downloaded at test time).
browser:
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium and chromium-driver for the console's browser tests"; \
	    apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; } || \
	    echo "could not install chromium: the console's browser tests will fail"; \
	  else echo "chromium missing (needs root and apt-get): the console's browser tests will fail"; fi; }

# The editable install also compiles the C extensions (setup.py): the reader's record
# decoder, the writer's batch encoder and the broker's request and record checks. An
# editable install leaves out millrace-pyspark-path.pth (a wheel has it): copied by hand.
$(STAMP): pyproject.toml setup.py millrace-pyspark-path.pth millrace_pyspark_path.py spark_connector/records/_native_records.c spark_connector/records/_native_batches.c broker/protocol/_record_check.c broker/protocol/_request_check.c broker/log/cleaner/_native_cleaner.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]' --config-settings editable_mode=compat
	$(PY) -c "import shutil, sysconfig; shutil.copy('millrace-pyspark-path.pth', sysconfig.get_paths()['purelib'])"
	@touch $(STAMP)

# Where PYTHONDONTWRITEBYTECODE is set (as on CI's machines) Python writes no bytecode, and
# every process compiles anew what it imports of the project: ~0.35 s per broker start, and
# the connector in every Python process Spark starts. compileall writes it regardless (only
# what is out of date: quick on a second run).
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 broker spark_connector kafka_security kio_loader pyspark_millrace millrace_pyspark_path.py jobs bench tests

# From Maven Central into an ignored cache (nothing from Kafka or Spark is committed):
#   kafka-4, kafka-3   the Kafka Java clients 4.x (with dependencies) and 3.9;
#   kafka-dist         Apache Kafka 3.9 itself, broker and tools (jvm/kafka-dist/pom.xml);
#   spark-kafka        Spark's own Kafka connector for spark.jars (jvm/spark-kafka/pom.xml);
#   delta              Delta Lake 4.4.0 for spark.jars (jvm/delta/pom.xml).
MVN := mvn -q -B -s jvm/maven-settings.xml
$(JVM_STAMP): jvm/pom.xml jvm/kafka-dist/pom.xml jvm/spark-kafka/pom.xml jvm/delta/pom.xml jvm/maven-settings.xml
	rm -rf $(JVM)/kafka-dist $(JVM)/spark-kafka $(JVM)/delta
	$(MVN) -f jvm/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JVM)/kafka-4
	$(MVN) -f jvm/pom.xml dependency:copy -Dartifact=org.apache.kafka:kafka-clients:$(KAFKA_CLIENTS_3) -DoutputDirectory=$(CURDIR)/$(JVM)/kafka-3
	$(MVN) -f jvm/kafka-dist/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(JVM)/kafka-dist
	$(MVN) -f jvm/spark-kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(JVM)/spark-kafka
	$(MVN) -f jvm/delta/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(JVM)/delta
	@touch $(JVM_STAMP)

test: setup
	$(PY) -m pytest -q -p no:cacheprovider --durations=40 -m "not long" tests

# The fault-injection tests (marker fault), the long ones (marker long) included, with longer
# runs: more seeded SIGKILLs of a broker in the middle of log cleaning
# (MILLRACE_COMPACTION_KILLS), 1,000,000 fuzzed requests against a broker
# (MILLRACE_FUZZ_REQUESTS; tests/fuzz/test_fuzz_long.py, figures in benchmarks/fuzz-long.json,
# replay with MILLRACE_FUZZ_SEED), and the Jepsen-style harness (tests/fault): for each of its
# twelve fault kinds a run of MILLRACE_FAULTS_PER_KIND faults against the four workloads at
# once (>= 100 faults per workload), whose reports (reliability/faults/*.json) become
# RELIABILITY.md's table, even when a run found an anomaly. About 90 minutes.
fault: setup
	MILLRACE_COMPACTION_KILLS=60 MILLRACE_FUZZ_REQUESTS=1000000 MILLRACE_FAULTS_PER_KIND=10 \
	  $(PY) -m pytest -q -p no:cacheprovider -m fault tests; \
	status=$$?; $(PY) -m tests.fault.report; exit $$status

test-unit: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "unit or property" tests

lint: setup
	$(VENV)/bin/ruff check broker kafka_security kio_loader spark_connector pyspark_millrace millrace_pyspark_path.py setup.py jobs tests bench
	$(VENV)/bin/ruff format --check broker kafka_security kio_loader spark_connector pyspark_millrace millrace_pyspark_path.py setup.py jobs tests bench
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff format broker kafka_security kio_loader spark_connector pyspark_millrace millrace_pyspark_path.py setup.py jobs tests bench
	$(VENV)/bin/ruff check --fix broker kafka_security kio_loader spark_connector pyspark_millrace jobs tests bench

demo: setup
	$(PY) -m broker.cli.demo

# Millrace beside Apache Kafka (bench/compare.py: workloads 1-6, BENCHMARKS.md + benchmarks/*.png;
# bench/transactions.py: transactional produce and read_committed reads; bench/compaction.py:
# the log cleaner's MB/s and CPU per MB, produce and fetch while it cleans; bench/idle_partitions.py:
# the idle CPU of 3,000 partitions RF=3 on 3 brokers each; bench/broker_latency.py: the
# broker's own share of end-to-end latency, plain sockets instead of clients; bench/aggregates.py:
# Spark with format("millrace") beside format("kafka") for an aggregation upserted exactly once
# into a compacted topic, a compacted topic read as a table, and a topic landed in Delta), then
# the Millrace-only cluster fail-over and consumer-group measurements; bench/secured_reads.py:
# format("millrace") reads over SASL_SSL beside PLAINTEXT on one broker; bench/failover.py: the
# unavailability after SIGKILL of a partition leader, 20 kills, beside Kafka; bench/metrics_cost.py:
# throughput and broker CPU with metrics on (scraped every second) and off; bench/first_batch.py: a
# streaming query's first micro-batch, format("millrace") beside format("kafka"); bench/produce_cpu.py:
# broker CPU per GB produced in 1 MB batches (acks=1, and acks=all RF=3); bench/scale_partitions.py:
# 10,000 partitions RF=3 on 3 brokers (creation, idle CPU, RSS, files, controller failover); bench/startup_memory.py:
# a broker's peak RSS during start-up against its steady RSS, empty and with data. Progress on stderr.
# (python -m bench.compaction --quick: the same at 50 MB, about a minute, into /tmp;
# python -m bench.aggregates --quick: reduced sizes, a few minutes, into /tmp.)
bench: setup
	$(PY) -m bench.compare
	$(PY) -m bench.transactions --records 200000 --per-txn 1000 --runs 3
	for v in 100 200 1024; do $(PY) -m bench.compaction --mb 500 --keys 100000 --runs 3 --value-bytes $$v || exit 1; done
	$(PY) -m bench.aggregates --records 2000000 --keys 10000 --max-offsets 500000 --table-updates 1000000 --table-keys 10000 --runs 3
	$(PY) -m bench.cluster --records 1000000 --runs 3 --kills 3
	$(PY) -m bench.groups --rebalances 5 --commit-seconds 20 --threads 4
	$(PY) -m bench.idle_partitions --partitions 3000 --seconds 30 --runs 3 --profile
	$(PY) -m bench.broker_latency --pairs 5000 --rounds 3
	$(PY) -m bench.e2e_tool --messages 10000 --runs 3
	$(PY) -m bench.boundaries --records 1000000 --runs 5
	$(PY) -m bench.secured_reads --records 2000000 --runs 3
	$(PY) -m bench.tls --records 1000000 --runs 3
	$(PY) -m bench.failover --kills 20
	$(PY) -m bench.metrics_cost --records 1000000 --small 5000 --runs 9
	$(PY) -m bench.startup_memory --runs 3 --settle 60
	$(PY) -m bench.first_batch --records 10000 --partitions 3 --runs 5
	$(PY) -m bench.read_ceiling --records 10000000 --runs 9
	$(PY) -m bench.produce_cpu --gb 1 --runs 7 --profile
	$(PY) -m bench.scale_partitions --partitions 10000 --runs 1

# Workloads 1-6 side by side at reduced sizes (under five minutes), into
# /tmp/millrace-bench-quick.md and /tmp/millrace-bench-quick/; BENCHMARKS.md is not touched.
bench-quick: setup
	$(PY) -m bench.compare --quick

cluster-up: setup
	$(VENV)/bin/millrace cluster up --dir $(DIR) --brokers $(BROKERS)

cluster-down: setup
	$(VENV)/bin/millrace cluster down --dir $(DIR)

clean:
	rm -rf run demo-run .pytest_cache .mypy_cache .ruff_cache
