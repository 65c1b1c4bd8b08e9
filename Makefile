# Millrace: the make targets other parts and users rely on (see ../shared/DESIGN.md, section 3).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DIR    ?= run/cluster
BROKERS ?= 1

.PHONY: setup test test-unit lint format demo bench bench-quick cluster-up cluster-down clean

JVM    := .cache/jvm
JVM_STAMP := $(JVM)/.fetched
KAFKA_CLIENTS_3 := 3.9.1

setup: $(STAMP) $(JVM_STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	@touch $(STAMP)

# The Kafka Java clients (4.x with its dependencies, and 3.9) for the Java compatibility
# tests, from Maven Central into an ignored cache.
$(JVM_STAMP): jvm/pom.xml
	mvn -q -B -f jvm/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JVM)/kafka-4
	mvn -q -B -f jvm/pom.xml dependency:copy -Dartifact=org.apache.kafka:kafka-clients:$(KAFKA_CLIENTS_3) -DoutputDirectory=$(CURDIR)/$(JVM)/kafka-3
	@touch $(JVM_STAMP)

test: setup
	$(PY) -m pytest -q -p no:cacheprovider tests

test-unit: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "unit or property" tests

lint: setup
	$(VENV)/bin/ruff check broker spark_connector pyspark_millrace jobs tests bench
	$(VENV)/bin/ruff format --check broker spark_connector pyspark_millrace jobs tests bench
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff format broker spark_connector pyspark_millrace jobs tests bench
	$(VENV)/bin/ruff check --fix broker spark_connector pyspark_millrace jobs tests bench

demo: setup
	$(PY) -m broker.cli.demo

bench: setup
	$(PY) bench/single_broker.py --records 1000000 --runs 3
	$(PY) bench/spark_read_write.py --records 10000000
	$(PY) bench/cluster.py --records 1000000 --runs 3 --kills 3
	$(PY) bench/groups.py --rebalances 5 --commit-seconds 20 --threads 4

bench-quick: setup
	$(PY) bench/single_broker.py --records 200000 --runs 1 --out /tmp/millrace-bench-quick.md
	$(PY) bench/spark_read_write.py --records 500000 --out /tmp/millrace-bench-quick.md
	$(PY) bench/cluster.py --records 100000 --runs 1 --kills 1 --out /tmp/millrace-bench-quick.md
	$(PY) bench/groups.py --rebalances 2 --commit-seconds 5 --threads 4 --out /tmp/millrace-bench-quick.md

cluster-up: setup
	$(VENV)/bin/millrace cluster up --dir $(DIR) --brokers $(BROKERS)

cluster-down: setup
	$(VENV)/bin/millrace cluster down --dir $(DIR)

clean:
	rm -rf run demo-run .pytest_cache .mypy_cache .ruff_cache
