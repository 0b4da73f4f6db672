#!/usr/bin/env bash
# Hostile-input benchmark (issue #12, "Measure"): every attack of the issue against the release
# `stackgate serve --kube off` (a fresh server per measurement: peak and retained RSS, answer
# time, HTTP status, response size, CPU, SIGTERM-to-exit), then the patched-review throughput
# against the do-nothing webhook at concurrency 16 (benches/loadbench.rs).
#
#   scripts/hostilebench.sh [--stackgate BIN] [--noop BIN] [--out DIR] [--before FILE] [--no-throughput] [ARGS...]
#
# ARGS go to examples/hostile_bench.rs, e.g. --sizes-mib 1.5,3,6 --copies 16 --attacks values-list.
# --stackgate/--noop measure other binaries (e.g. an older build); --out DIR keeps
# hostile.md, hostile.json, throughput.md and throughput.json there; with --before FILE (the
# hostile.json of an earlier run) it also writes compare.md, one before/after table.
# Every loop is time-bounded; a full run takes about 10-15 minutes on 2 cores.
# Method and numbers: BENCHMARKS.md ("Hostile input").
set -euo pipefail

stackgate=""
noop=""
out=""
before=""
throughput=1
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --stackgate) stackgate="$(realpath "$2")"; shift 2 ;;
        --noop) noop="$(realpath "$2")"; shift 2 ;;
        --out) out="$(realpath -m "$2")"; shift 2 ;;
        --before) before="$(realpath "$2")"; shift 2 ;;
        --no-throughput) throughput=0; shift ;;
        *) args+=("$1"); shift ;;
    esac
done

[ -n "$before" ] && [ -z "$out" ] && { echo "--before needs --out DIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
cargo build --release --locked --bin stackgate --example noop_webhook --example hostile_bench
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"

hostile=("$target_dir/release/examples/hostile_bench")
[ -n "$stackgate" ] && hostile+=(--stackgate "$stackgate")
load=(--concurrency 16 --paced-rps 0 --soak-secs 0 --ready-runs 1 --duration-secs 5 --warmup-secs 1)
[ -n "$stackgate" ] && load+=(--stackgate "$stackgate")
[ -n "$noop" ] && load+=(--noop "$noop")

if [ -n "$out" ]; then
    mkdir -p "$out"
    "${hostile[@]}" --json "$out/hostile.json" "${args[@]+"${args[@]}"}" | tee "$out/hostile.md"
    if [ -n "$before" ]; then
        "${hostile[0]}" --render "$out/hostile.json" --compare "$before" | tee "$out/compare.md"
    fi
    if [ "$throughput" = 1 ]; then
        cargo bench --locked --bench loadbench -- "${load[@]}" --json "$out/throughput.json" | tee "$out/throughput.md"
    fi
else
    "${hostile[@]}" "${args[@]+"${args[@]}"}"
    if [ "$throughput" = 1 ]; then
        cargo bench --locked --bench loadbench -- "${load[@]}"
    fi
fi
