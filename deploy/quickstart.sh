#!/usr/bin/env bash
# Runs the gateway from a fresh Debian machine on the embedded store with the example
# configuration (conf/gateway.yaml). Set OPENAI_API_KEY to reach the real upstream.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cmake >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq cmake
  else sudo apt-get update -qq && sudo apt-get install -y -qq cmake; fi
fi
if [ -z "${GATEWAY_ADMIN_TOKEN:-}" ]; then
  GATEWAY_ADMIN_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  export GATEWAY_ADMIN_TOKEN
  echo "admin token for this run: $GATEWAY_ADMIN_TOKEN"
fi
cargo build --release
exec target/release/model-gateway serve --config conf/gateway.yaml
