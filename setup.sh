#!/usr/bin/env bash
# Creates .venv/ and installs pwevent into it. `./setup.sh test` also installs what the tests
# need (the test extras, and a JDK, used as the oracle of the TLNS generator, if none is present).
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
else
  .venv/bin/python -m pip install --quiet -e .
fi
