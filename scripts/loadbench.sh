#!/usr/bin/env bash
# Load benchmark: stackgate serve against the do-nothing webhook, same TLS/HTTP stack, same run.
# Builds both release binaries, then runs benches/loadbench.rs; extra arguments go to it, e.g.
#   scripts/loadbench.sh --duration-secs 5 --concurrency 1,16,64 --soak-secs 120 --json /tmp/load.json
# Method and numbers: BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin stackgate --example noop_webhook
exec cargo bench --locked --bench loadbench -- "$@"
