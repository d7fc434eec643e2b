#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs what is missing (cmake to
# build Pingora, redis-server for the Redis tests, a Python venv with the official SDKs
# for the end-to-end tests, Chromium for the console's browser test when Node is here),
# checks that the console's committed build matches its sources, then checks formatting
# and lints, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v python3 >/dev/null || missing+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
# The console's browser test drives Debian's Chromium; it needs Node to run at all.
if command -v node >/dev/null && [ ! -x /usr/bin/chromium ]; then missing+=(chromium); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root apt-get install -y -qq "${missing[@]}"
fi
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust (https://rustup.rs), then run this again" >&2
  exit 1
fi

venv=target/py
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import openai, anthropic, google.genai, pytest, botocore, jwt, h2, openapi_spec_validator' 2>/dev/null; then
  "$venv/bin/python" -m pip install -q -r tests/e2e/requirements.txt
fi
export MG_PYTHON="$PWD/$venv/bin/python"

# The console's files are built into the binary from console/dist, committed so that
# `cargo build` never needs Node. Where Node is, rebuild them from the sources into
# target/ and check that they are what is committed; then the browser test must run.
if command -v node >/dev/null && command -v npm >/dev/null; then
  (cd console && npm ci --no-audit --no-fund --loglevel=error)
  rebuilt="$PWD/target/console-dist"
  (cd console && npm run --silent build -- --outDir "$rebuilt" --emptyOutDir --logLevel warn)
  if ! diff -r console/dist "$rebuilt"; then
    echo "console/dist does not match console/src: run 'npm run build' in console/ and commit console/dist" >&2
    exit 1
  fi
  export MG_REQUIRE_BROWSER=1
else
  echo "node not found: the console's build is not checked against its sources and its browser test does not run"
fi

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
