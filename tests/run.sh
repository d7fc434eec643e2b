#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs what is missing (cmake to
# build Pingora, redis-server for the Redis tests, a Python venv with the official SDKs
# for the end-to-end tests), then checks formatting and lints, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v python3 >/dev/null || missing+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
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
if ! "$venv/bin/python" -c 'import openai, anthropic, google.genai, pytest' 2>/dev/null; then
  "$venv/bin/python" -m pip install -q -r tests/e2e/requirements.txt
fi
export MG_PYTHON="$PWD/$venv/bin/python"

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets
