#!/usr/bin/env bash
# Instructions per review in a release server, counted by callgrind (deterministic on a busy
# machine, unlike the load bench's wall clock). Method: BENCHMARKS.md, "The release server per
# review, by instructions". The server runs as the load bench runs it (stackgate: `serve
# --log-format json --log-level info --kube off --policies <bench policies>`); one keep-alive
# `curl --http1.1` connection sends the same review N times, for N = 200 and N = 1200, and
# per review = (total at 1200 - total at 200) / 1000, so start-up and shutdown cancel.
#
#   scripts/loadbench-callgrind.sh stackgate|noop BODY.json [PATH]
#
# BODY.json: a load case's body, from `cargo bench --bench loadbench -- --write-bodies DIR`.
# Needs the release binaries (`cargo build --release --locked --bin stackgate --example
# noop_webhook`; STACKGATE_BIN=PATH measures another stackgate binary), valgrind, curl and
# openssl. Prints "<server> <body> <per review>".
set -euo pipefail
cd "$(dirname "$0")/.."
server=$1
body=$2
path=${3:-/mutate?timeout=10s}
port=${LOADBENCH_CALLGRIND_PORT:-19443}
admin=$((port + 2))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost \
    -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null

case $server in
stackgate)
    # The bench's policies: the repository's, with the namespace `openstack` pinned to a
    # static release (benches/support/cases.rs, bench_policy_files).
    mkdir "$work/policies"
    cp policies/*.yaml "$work/policies/"
    sed -i 's/^params:$/params:\n  namespaceReleases:\n    openstack: openstack-operator-84322c77/' \
        "$work/policies/release-annotations.yaml"
    cmd=("${STACKGATE_BIN:-target/release/stackgate}" serve --log-format json --log-level info --kube off
        --policies "$work/policies")
    ;;
noop) cmd=(target/release/examples/noop_webhook) ;;
*)
    echo "server: stackgate or noop" >&2
    exit 2
    ;;
esac

total() { # N -> total instructions of the server that answered N reviews
    local n=$1 out="$work/callgrind.$1"
    valgrind --tool=callgrind --callgrind-out-file="$out" "${cmd[@]}" \
        --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" \
        --tls-cert "$work/tls.crt" --tls-key "$work/tls.key" >"$work/server.$n.log" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null && break
        sleep 0.1
    done
    local urls=()
    for _ in $(seq "$n"); do urls+=("https://localhost:$port$path"); done
    curl -sf --http1.1 --cacert "$work/tls.crt" -H 'content-type: application/json' \
        --data-binary "@$body" "${urls[@]}" >"$work/answers.$n"
    kill -TERM "$pid"
    wait "$pid" || true
    local answered
    answered=$(grep -o '"allowed"' "$work/answers.$n" | wc -l)
    if [ "$answered" -ne "$n" ]; then
        echo "$server answered $answered of $n reviews; log: $(cat "$work/server.$n.log")" >&2
        exit 1
    fi
    sed -n 's/^summary: //p' "$out"
}

small=$(total 200)
large=$(total 1200)
# To see where the instructions go: LOADBENCH_CALLGRIND_KEEP=DIR keeps both profiles
# (`callgrind_annotate --inclusive=yes DIR/callgrind.1200`, minus the same at 200).
if [ -n "${LOADBENCH_CALLGRIND_KEEP:-}" ]; then
    mkdir -p "$LOADBENCH_CALLGRIND_KEEP"
    cp "$work/callgrind.200" "$work/callgrind.1200" "$LOADBENCH_CALLGRIND_KEEP/"
fi
echo "$server $(basename "$body") $(((large - small) / 1000))"
