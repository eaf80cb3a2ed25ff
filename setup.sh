#!/usr/bin/env bash
# Creates .venv/ and installs pwevent into it with the demo extra (the embedded broker that
# `pwevent demo` runs). `./setup.sh test` installs the test extra instead, which includes the demo,
# eval and avro extras, and fetches, once each, what the tests run against:
# - a JDK, the oracle of the TLNS generator, if none is present;
# - the pinned Apache Kafka broker (deploy/apache-kafka/pom.xml), with Maven, into .kafka/libs/,
#   with an archive of the classes a node loads, .kafka/kafka-classes.jsa, which starts the tests'
#   nodes faster;
# - the pinned schema registry the Avro source tests run against (deploy/schema-registry/pom.xml)
#   into .schema-registry/;
# - Debian's headless Chromium and chromedriver, which render the dashboard in its tests, if
#   /usr/bin/chromium or /usr/bin/chromedriver is missing;
# - what the local-DP clients' tests need: the TypeScript client's compiler (npm ci in
#   clients/typescript) and the Java client's test dependencies (Maven, in clients/java).
# Maven, Node and npm come from Debian's packages if missing. Nothing else is downloaded.
# The Python packages are installed by uv (itself installed with pip), and the downloads run while
# they install. Both compile the project's modules.
set -euo pipefail
cd "$(dirname "$0")"
testing=0
if [ "${1:-}" = "test" ]; then
  testing=1
fi

# Debian's packages, all in one apt-get run; the tools other steps need are installed before those
# steps start, Chromium alongside them
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: the tests need $* (Debian packages); install them, or run this on Debian" >&2
    exit 1
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    >/dev/null
}

# background steps: their ids, and what each is, for the error that names a failed one
pids=()
steps=()
start() {
  local name=$1
  shift
  "$@" &
  pids+=($!)
  steps+=("$name")
}
finish() {
  local i failed=0
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "setup.sh: ${steps[$i]} failed" >&2
      failed=1
    fi
  done
  pids=()
  steps=()
  if [ "$failed" -ne 0 ]; then
    exit 1
  fi
}

# Maven, its output shown only when it fails: in quiet mode it still prints bare colour codes
quiet_mvn() {
  local out
  out=$(mktemp)
  if ! mvn -q -B "$@" >"$out" 2>&1; then
    cat "$out" >&2
    rm -f "$out"
    return 1
  fi
  rm -f "$out"
}

fetch_kafka_and_registry() {
  if [ ! -f "$registry_jar" ]; then
    rm -rf .schema-registry.partial
    quiet_mvn -f deploy/schema-registry/pom.xml dependency:copy@fetch \
      -Dregistry.dir="$PWD/.schema-registry.partial"
    tar xzf .schema-registry.partial/registry.tar.gz -C .schema-registry.partial
    rm .schema-registry.partial/registry.tar.gz
    rm -rf .schema-registry && mv .schema-registry.partial .schema-registry
  fi
  if [ ! -f ".kafka/libs/kafka_2.13-${kafka_version}.jar" ]; then
    rm -rf .kafka/libs.partial
    quiet_mvn -f deploy/apache-kafka/pom.xml dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/.kafka/libs.partial"
    rm -rf .kafka/libs && mv .kafka/libs.partial .kafka/libs
    rm -f .kafka/kafka-classes.jsa  # made from the jars replaced
  fi
  # the Java client's test dependencies, resolved by running its tests once, so that
  # tests/ldp_client/test_other_languages.py runs them offline (after the fetches above: one
  # Maven at a time writes the local repository)
  quiet_mvn -f clients/java/pom.xml test
}

# the test modules as pytest rewrites their asserts, written once: with PYTHONDONTWRITEBYTECODE
# set, every test process of a run rewrote every test module as it collected them (about 6 s of
# CPU each). A module that fails to collect is reported by the test run itself.
rewrite_test_asserts() {
  env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest --collect-only -q \
    -p no:cacheprovider >/dev/null 2>&1 || true
}

if [ "$testing" -eq 1 ]; then
  tools=()
  if ! command -v javac >/dev/null 2>&1; then
    tools+=(default-jdk-headless)
  fi
  for tool in mvn:maven node:nodejs npm:npm; do
    if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
      tools+=("${tool#*:}")
    fi
  done
  browser=()
  if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    browser=(chromium chromium-driver)
  fi
  if [ "${#tools[@]}" -gt 0 ]; then
    apt_install "${tools[@]}" "${browser[@]}"
  elif [ "${#browser[@]}" -gt 0 ]; then
    start "installing Chromium (apt-get)" apt_install "${browser[@]}"
  fi
  kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' deploy/apache-kafka/pom.xml)
  registry_version=$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' \
    deploy/schema-registry/pom.xml)
  registry_jar=".schema-registry/apicurio-registry-app-${registry_version}-runner.jar"
  start "fetching Apache Kafka, the schema registry and the Java client's dependencies (mvn)" \
    fetch_kafka_and_registry
  start "installing the TypeScript client's compiler (npm ci)" \
    bash -c 'cd clients/typescript && npm ci --silent --no-audit --no-fund'
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet uv
extra=demo
if [ "$testing" -eq 1 ]; then
  extra=test
fi
# uv does not read pip's settings: the index, extra index, local wheels and certificate bundle
# pip is given are passed on
uv_args=()
if [ -n "${PIP_INDEX_URL:-}" ]; then
  uv_args+=(--index-url "$PIP_INDEX_URL")
fi
if [ -n "${PIP_EXTRA_INDEX_URL:-}" ]; then
  uv_args+=(--extra-index-url "$PIP_EXTRA_INDEX_URL")
fi
if [ -n "${PIP_FIND_LINKS:-}" ] && [ -d "$PIP_FIND_LINKS" ]; then
  uv_args+=(--find-links "$PIP_FIND_LINKS")
fi
if [ -n "${PIP_CERT:-}" ] && [ -z "${SSL_CERT_FILE:-}" ]; then
  export SSL_CERT_FILE="$PIP_CERT"
fi
UV_NATIVE_TLS=1 .venv/bin/python -m uv pip install --quiet --compile-bytecode \
  --python .venv/bin/python "${uv_args[@]}" -e ".[$extra]"
# the project's own modules compiled once: an editable install leaves them to the first import,
# and with PYTHONDONTWRITEBYTECODE set every process start compiles them again (about 0.3 s of
# CPU for each worker, command and test process)
compiled=(streams mechanisms local_kafka)
if [ "$testing" -eq 1 ]; then
  compiled+=(tests benchmarks conftest.py)
  finish
  if [ ! -f .kafka/kafka-classes.jsa ]; then
    # the classes a Kafka node loads, archived once: every node and tool the tests start maps
    # them instead of loading them from the jars (local_kafka/apache.py, class_archive)
    start "archiving Kafka's classes" .venv/bin/python -c \
      'from local_kafka.apache import make_class_archive; make_class_archive()'
  fi
fi
.venv/bin/python -m compileall -q "${compiled[@]}" >/dev/null
if [ "$testing" -eq 1 ]; then
  start "writing the test modules' rewritten asserts (pytest --collect-only)" rewrite_test_asserts
fi
finish
