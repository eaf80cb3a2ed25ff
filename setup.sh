#!/usr/bin/env bash
# Creates .venv/ and installs pwevent into it with the demo extra (the embedded broker that
# `pwevent demo` runs). `./setup.sh test` installs the test extra instead, which includes the demo,
# eval and avro extras, a JDK, used as the oracle of the TLNS generator, if none is present, and
# Debian's headless Chromium and chromedriver, which render the dashboard in its tests, if
# /usr/bin/chromium or /usr/bin/chromedriver is missing, and the pinned Apache Kafka broker
# (deploy/apache-kafka/pom.xml) with Maven into .kafka/libs/, once (with an archive of the
# classes a node loads, .kafka/kafka-classes.jsa, which starts the tests' nodes faster), and the
# pinned schema registry the Avro source tests run against (deploy/schema-registry/pom.xml) into
# .schema-registry/, once (Maven itself from Debian's packages if it is missing), and what the
# local-DP clients' tests need: the TypeScript client's compiler (npm ci in clients/typescript)
# and the Java client's test dependencies (Maven, in clients/java; Node, npm and Maven from
# Debian's packages if missing). Nothing else is downloaded. Both compile the project's modules.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if [ "${1:-}" = "test" ]; then
  .venv/bin/python -m pip install --quiet -e '.[test]'
  if ! command -v javac >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && apt-get install -y -qq default-jdk-headless >/dev/null
    else
      echo "setup.sh: the tests need a JDK (javac and java) on PATH" >&2
      exit 1
    fi
  fi
  kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' deploy/apache-kafka/pom.xml)
  registry_version=$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' \
    deploy/schema-registry/pom.xml)
  registry_jar=".schema-registry/apicurio-registry-app-${registry_version}-runner.jar"
  if [ ! -f ".kafka/libs/kafka_2.13-${kafka_version}.jar" ] || [ ! -f "$registry_jar" ]; then
    if ! command -v mvn >/dev/null 2>&1; then
      if command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq maven >/dev/null
      else
        echo "setup.sh: fetching Apache Kafka and the schema registry needs Maven (mvn) on PATH" >&2
        exit 1
      fi
    fi
  fi
  if [ ! -f "$registry_jar" ]; then
    rm -rf .schema-registry.partial
    mvn -q -B -f deploy/schema-registry/pom.xml dependency:copy@fetch \
      -Dregistry.dir="$PWD/.schema-registry.partial"
    tar xzf .schema-registry.partial/registry.tar.gz -C .schema-registry.partial
    rm .schema-registry.partial/registry.tar.gz
    rm -rf .schema-registry && mv .schema-registry.partial .schema-registry
  fi
  if [ ! -f ".kafka/libs/kafka_2.13-${kafka_version}.jar" ]; then
    rm -rf .kafka/libs.partial
    mvn -q -B -f deploy/apache-kafka/pom.xml dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/.kafka/libs.partial"
    rm -rf .kafka/libs && mv .kafka/libs.partial .kafka/libs
    rm -f .kafka/kafka-classes.jsa  # made from the jars replaced
  fi
  if [ ! -f .kafka/kafka-classes.jsa ]; then
    # the classes a Kafka node loads, archived once: every node and tool the tests start maps
    # them instead of loading them from the jars (local_kafka/apache.py, class_archive)
    .venv/bin/python -c 'from local_kafka.apache import make_class_archive; make_class_archive()'
  fi
  if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    if command -v apt-get >/dev/null 2>&1; then
      sudo=""
      if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
      fi
      $sudo apt-get update -qq
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver >/dev/null
    else
      echo "setup.sh: the dashboard tests need Chromium and chromedriver (/usr/bin/chromium)" >&2
      exit 1
    fi
  fi
  # the local-DP clients (clients/): the TypeScript package's pinned compiler (npm ci) and the
  # Java module's test dependencies, resolved by running its tests once, so that
  # tests/ldp_client/test_other_languages.py runs both offline (Node and Maven from Debian's
  # packages if missing)
  for tool in node:nodejs npm:npm mvn:maven; do
    if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
      if command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq "${tool#*:}" >/dev/null
      else
        echo "setup.sh: the client tests need ${tool%%:*} on PATH" >&2
        exit 1
      fi
    fi
  done
  (cd clients/typescript && npm ci --silent --no-audit --no-fund)
  mvn -q -B -f clients/java/pom.xml test
else
  .venv/bin/python -m pip install --quiet -e '.[demo]'
fi
# the project's own modules compiled once: an editable install leaves them to the first import,
# and with PYTHONDONTWRITEBYTECODE set every process start compiles them again (about 0.3 s of
# CPU for each worker, command and test process)
compiled=(streams mechanisms local_kafka)
if [ "${1:-}" = "test" ]; then
  compiled+=(tests benchmarks conftest.py)
fi
.venv/bin/python -m compileall -q "${compiled[@]}" >/dev/null
