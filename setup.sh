#!/usr/bin/env bash
# Creates .venv/ and installs pwevent into it with the demo extra (the embedded broker that
# `pwevent demo` runs). `./setup.sh test` installs the test extra instead, which includes the demo
# and eval extras, and a JDK, used as the oracle of the TLNS generator, if none is present.
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
  .venv/bin/python -m pip install --quiet -e '.[demo]'
fi
