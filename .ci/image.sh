#!/usr/bin/env bash
# The stackgate image, built and started without a container daemon or a registry:
#   1. the root filesystem from a release binary and Debian's packages (scripts/image-rootfs.sh),
#   2. an OCI image layout written directly (.ci/oci-layout.py), twice: same digest or fail,
#   3. the Dockerfile compared with it (what can be compared without building it: see below),
#   4. `umoci unpack` of the layout into a runtime bundle, started by `runc` as user 65532 with a
#      read-only root filesystem, no capabilities, no new privileges, its own network namespace,
#   5. probes: /readyz on the admin port, one captured AdmissionReview to /mutate over HTTPS
#      (certificates from certs/gen-dev-certs.sh, bind-mounted read-only), and checks that the
#      process is uid 65532 with NoNewPrivs, no capability, a read-only / and no shell to exec.
# Prints the image size and the start-to-ready time (BENCHMARKS.md records them) and writes
# them to OUT/report.txt. Fails loudly; never skips. Runs as root (CI does).
#
#   .ci/image.sh [--binary PATH] [--out DIR] [--build-only]
#
# --binary      a release build of stackgate (default: `cargo build --release --locked` here)
# --out         work directory (default target/image); the layout is OUT/layout, tag "dev"
# --build-only  steps 1-3 only (the release workflow, whose container cannot run runc; CI
#               runs all the steps on the same script for every commit)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BINARY=""
OUT="target/image"
BUILD_ONLY=0
while [[ $# -gt 0 ]]; do
    case "$1" in
    --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
    --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    *) echo "usage: $0 [--binary PATH] [--out DIR] [--build-only]" >&2; exit 2 ;;
    esac
done

fail() {
    echo "image.sh: FAILED: $*" >&2
    exit 1
}
step() { echo "==> $*"; }

[[ "$(id -u)" == 0 ]] || fail "runs as root (runc with a uid map of its own is not set up here)"

# ------------------------------------------------------------------ tools (Debian packages)
need=()
command -v python3 >/dev/null || need+=(python3)
if [[ "$BUILD_ONLY" == 0 ]]; then
    command -v umoci >/dev/null || need+=(umoci)
    command -v runc >/dev/null || need+=(runc)
    command -v openssl >/dev/null || need+=(openssl)
    command -v curl >/dev/null || need+=(curl)
    command -v nsenter >/dev/null || need+=(util-linux)
    command -v ip >/dev/null || need+=(iproute2)
fi
[[ -d /usr/share/ca-certificates/mozilla ]] || need+=(ca-certificates)
if [[ ${#need[@]} -gt 0 ]]; then
    step "apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || fail "apt-get update"
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || fail "apt-get install ${need[*]}"
fi
[[ "$BUILD_ONLY" == 1 ]] || echo "umoci $(umoci --version | awk '{print $3}'), $(runc --version | head -n 1)"

# ------------------------------------------------------------------ the image's metadata
# One place for what the image declares; the Dockerfile check below holds it to the same.
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
# Reproducible: the commit's time, not the clock.
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH
USER_ID="65532:65532"
ENTRYPOINT="/usr/local/bin/stackgate"
CMD="serve"
PORTS=(8443 8080)
case "$(uname -m)" in
x86_64) ARCH=amd64 ;;
aarch64) ARCH=arm64 ;;
*) fail "unsupported machine $(uname -m)" ;;
esac

# ------------------------------------------------------------------ binary
if [[ -z "$BINARY" ]]; then
    step "cargo build --release --locked --bin stackgate"
    cargo build --release --locked --bin stackgate
    BINARY=target/release/stackgate
fi
[[ -x "$BINARY" ]] || fail "$BINARY is not an executable"

rm -rf "$OUT"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

build_layout() { # ROOTFS LAYOUT PACKAGES_FILE -> prints the manifest digest
    local rootfs="$1" layout="$2" packages="$3"
    bash scripts/image-rootfs.sh "$BINARY" "$rootfs" "$packages" 2>/dev/null
    local labels=(
        "org.opencontainers.image.title=stackgate"
        "org.opencontainers.image.description=Admission webhook and GitOps checker that keeps OpenStack-on-Kubernetes platforms out of known failure modes"
        "org.opencontainers.image.licenses=Apache-2.0"
        "org.opencontainers.image.version=$VERSION"
        "org.opencontainers.image.revision=$REVISION"
        "org.opencontainers.image.created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
        "dev.stackgate.image.debian-packages=$(paste -sd ' ' "$packages")"
    )
    local args=(--tag dev --arch "$ARCH" --epoch "$SOURCE_DATE_EPOCH" --user "$USER_ID"
        --entrypoint "$ENTRYPOINT" --cmd "$CMD")
    for port in "${PORTS[@]}"; do args+=(--port "$port"); done
    for label in "${labels[@]}"; do args+=(--label "$label"); done
    python3 .ci/oci-layout.py "$rootfs" "$layout" "${args[@]}"
}

step "build the image twice (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH): same digest"
DIGEST1="$(build_layout "$OUT/rootfs" "$OUT/layout" "$OUT/packages.txt")" || fail "first build"
DIGEST2="$(build_layout "$OUT/rootfs-again" "$OUT/layout-again" "$OUT/packages-again.txt")" || fail "second build"
[[ "$DIGEST1" == "$DIGEST2" ]] || fail "two builds gave different digests: $DIGEST1 and $DIGEST2"
diff -r "$OUT/layout" "$OUT/layout-again" >/dev/null || fail "two builds wrote different layouts"
rm -rf "$OUT/rootfs-again" "$OUT/layout-again" "$OUT/packages-again.txt"
echo "  $DIGEST1 (both builds)"
echo "  packages: $(paste -sd ' ' "$OUT/packages.txt")"

step "the image's files: no shell, only the binary, its libraries, CA roots, nsswitch.conf"
(cd "$OUT/rootfs" && find . -mindepth 1 -printf '%M %U:%G %p\n' | sort -k3) >"$OUT/files.txt"
cat "$OUT/files.txt" | sed 's/^/  /'
for shell in bin/sh bin/bash bin/dash usr/bin/sh bin/busybox; do
    [[ ! -e "$OUT/rootfs/$shell" ]] || fail "the image has a shell: /$shell"
done
grep -v ' 0:0 ' "$OUT/files.txt" && fail "a file not owned by root:root"
true

step "Dockerfile: declares the same filesystem and metadata"
# What is compared (no daemon, so the Dockerfile is parsed, not built):
#   - its final stage is FROM scratch and its only COPY takes the directory that a stage
#     filled by running scripts/image-rootfs.sh, the script that made the tree above; so the
#     file list, modes and owners come from the same code (chmod/chown/touch inside it);
#   - USER, ENTRYPOINT, CMD, EXPOSE and the LABEL keys equal the OCI config written here.
# What is not: the bytes of the libraries and CA roots, which in a Docker build come from the
# build image's Debian packages (the same Debian release, maybe another point release), and
# the binary, which Docker compiles in its own build stage.
python3 - Dockerfile "$OUT/layout" "$USER_ID" "$ENTRYPOINT" "$CMD" "${PORTS[*]}" <<'PY' || fail "Dockerfile and image differ"
import json, os, re, shlex, sys

dockerfile, layout, user, entrypoint, cmd, ports = sys.argv[1:]
lines, cont = [], ""
for raw in open(dockerfile):
    line = raw.rstrip("\n")
    if not cont and (not line.strip() or line.lstrip().startswith("#")):
        continue
    if line.endswith("\\"):
        cont += line[:-1] + " "
        continue
    lines.append((cont + line).strip())
    cont = ""

stages, current = [], None
for line in lines:
    word, _, rest = line.partition(" ")
    word = word.upper()
    if word == "FROM":
        parts = rest.split()
        name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
        current = {"from": parts[0], "name": name, "cmds": []}
        stages.append(current)
    elif current is not None:
        current["cmds"].append((word, rest.strip()))

errors = []
final = stages[-1]
if final["from"] != "scratch":
    errors.append(f"final stage is FROM {final['from']}, expected scratch (no shell, nothing unlisted)")
copies = [rest for word, rest in final["cmds"] if word in ("COPY", "ADD")]
if len(copies) != 1:
    errors.append(f"final stage has {len(copies)} COPY/ADD lines, expected exactly one")
else:
    m = re.fullmatch(r"--from=(\S+)\s+(\S+)/\s+/", copies[0])
    if not m:
        errors.append(f"final COPY is '{copies[0]}', expected 'COPY --from=STAGE DIR/ /'")
    else:
        src_stage, src_dir = m.groups()
        stage = next((s for s in stages if s["name"] == src_stage), None)
        runs = [rest for word, rest in (stage["cmds"] if stage else []) if word == "RUN"]
        if not any(re.search(r"scripts/image-rootfs\.sh\s+\S+\s+" + re.escape(src_dir) + r"(\s|$)", r) for r in runs):
            errors.append(f"stage {src_stage} does not fill {src_dir} with scripts/image-rootfs.sh")

def directive(word):
    values = [rest for w, rest in final["cmds"] if w == word]
    return values[-1] if values else None

def exec_form(value):
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return None

want = {"USER": user, "ENTRYPOINT": [entrypoint], "CMD": [cmd]}
got = {"USER": directive("USER"), "ENTRYPOINT": exec_form(directive("ENTRYPOINT")), "CMD": exec_form(directive("CMD"))}
for key in want:
    if got[key] != want[key]:
        errors.append(f"Dockerfile {key} is {got[key]!r}, the image's is {want[key]!r}")
exposed = sorted(p for w, rest in final["cmds"] if w == "EXPOSE" for p in rest.split())
if exposed != sorted(ports.split()):
    errors.append(f"Dockerfile EXPOSE {exposed}, image {sorted(ports.split())}")

index = json.load(open(os.path.join(layout, "index.json")))
blob = lambda d: json.load(open(os.path.join(layout, "blobs", *d.split(":"))))
config = blob(blob(index["manifests"][0]["digest"])["config"]["digest"])["config"]
docker_labels = set()
for w, rest in final["cmds"]:
    if w == "LABEL":
        for token in shlex.split(rest):
            docker_labels.add(token.split("=", 1)[0])
if docker_labels != set(config["Labels"]):
    errors.append(f"LABEL keys differ: Dockerfile only {sorted(docker_labels - set(config['Labels']))}, image only {sorted(set(config['Labels']) - docker_labels)}")
if config["User"] != user or config["Entrypoint"] != [entrypoint] or config["Cmd"] != [cmd]:
    errors.append(f"OCI config differs from what the script asked for: {config}")

for e in errors:
    print("  " + e)
if errors:
    sys.exit(1)
print(f"  final stage FROM scratch, one COPY of the image-rootfs.sh tree; USER, ENTRYPOINT, CMD, EXPOSE, {len(docker_labels)} LABEL keys: same")
PY

if [[ "$BUILD_ONLY" == 1 ]]; then
    echo "image $DIGEST1 ($ARCH), layout $OUT/layout:dev (built, not started: --build-only)"
    exit 0
fi

step "umoci unpack"
BUNDLE="$OUT/bundle"
umoci unpack --image "$OUT/layout:dev" "$BUNDLE" >/dev/null || fail "umoci unpack"
(cd "$BUNDLE/rootfs" && find . -mindepth 1 -printf '%M %U:%G %p\n' | sort -k3) >"$OUT/files-unpacked.txt"
diff "$OUT/files.txt" "$OUT/files-unpacked.txt" || fail "umoci unpacked another tree than the one built"
echo "  unpacked tree equals the built tree (names, modes, owners)"

step "certificates for localhost (certs/gen-dev-certs.sh), readable by uid 65532"
CERTS="$OUT/certs"
bash certs/gen-dev-certs.sh --out "$CERTS" --days 2 >/dev/null 2>"$OUT/certs.log" || {
    cat "$OUT/certs.log"
    fail "certs/gen-dev-certs.sh"
}
mkdir -p "$OUT/tls"
install -m 0444 -o 65532 -g 65532 "$CERTS/tls.crt" "$CERTS/tls.key" "$OUT/tls/"

step "runtime config: user 65532, read-only /, no capabilities, no new privileges"
# umoci wrote a config.json from the image config; keep its process (args, env, user) and
# tighten the rest, as the chart's securityContext does.
python3 - "$BUNDLE/config.json" "$OUT/tls" <<'PY' || fail "runtime config"
import json, sys
path, tls = sys.argv[1:]
c = json.load(open(path))
proc = c["process"]
assert proc["user"]["uid"] == 65532 and proc["user"]["gid"] == 65532, proc["user"]
assert proc["args"] == ["/usr/local/bin/stackgate", "serve"], proc["args"]
proc["args"] += ["--kube", "off", "--tls-cert", "/etc/stackgate/tls/tls.crt", "--tls-key", "/etc/stackgate/tls/tls.key"]
proc["terminal"] = False
proc["noNewPrivileges"] = True
proc["capabilities"] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
proc["rlimits"] = [{"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096}]
c["root"] = {"path": "rootfs", "readonly": True}
c["hostname"] = "stackgate"
linux = c.setdefault("linux", {})
linux["namespaces"] = [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]
linux.pop("uidMappings", None)
linux.pop("gidMappings", None)
linux["maskedPaths"] = ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"]
linux["readonlyPaths"] = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
c["mounts"] = [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "noexec", "size=16m"]},
    {"destination": "/etc/stackgate/tls", "type": "bind", "source": tls, "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]},
]
json.dump(c, open(path, "w"), indent=1)
PY

CONTAINER="stackgate-image-ci-$$"
cleanup() {
    runc kill "$CONTAINER" KILL >/dev/null 2>&1 || true
    sleep 0.2
    runc delete --force "$CONTAINER" >/dev/null 2>&1 || true
}
trap cleanup EXIT

step "runc run (detached)"
start_ns="$(date +%s%N)"
(cd "$BUNDLE" && runc run --detach --pid-file "$OUT/pid" "$CONTAINER" >"$OUT/container.log" 2>&1 </dev/null) || {
    cat "$OUT/container.log"
    fail "runc run"
}
PID="$(cat "$OUT/pid")"
in_net() { nsenter --target "$PID" --net -- "$@"; }
# A new network namespace has its loopback down; the container only binds, so bringing it
# up from outside is what makes 127.0.0.1 reachable for the probes.
in_net ip link set lo up || fail "loopback up in the container's network namespace"
ready=0
for _ in $(seq 1 3000); do
    if in_net curl -fsS --max-time 1 http://127.0.0.1:8080/readyz >/dev/null 2>&1; then
        ready=1
        break
    fi
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.01
done
ready_ns="$(date +%s%N)"
[[ "$ready" == 1 ]] || {
    cat "$OUT/container.log"
    fail "/readyz did not answer 200 within 30 s"
}
START_TO_READY_MS=$(((ready_ns - start_ns) / 1000000))
echo "  /readyz 200 after ${START_TO_READY_MS} ms (runc run to first 200, polled every 10 ms)"

step "one captured AdmissionReview to /mutate over HTTPS"
FIXTURE=tests/fixtures/captured/secret/mutate-create-cloud-config-from-file.json
in_net curl -fsS --max-time 10 --cacert "$CERTS/ca.crt" -H 'Content-Type: application/json' \
    --data-binary "@$FIXTURE" 'https://localhost:8443/mutate?timeout=10s' >"$OUT/review.json" ||
    fail "POST /mutate"
python3 - "$FIXTURE" "$OUT/review.json" <<'PY' || fail "AdmissionReview answer"
import base64, json, sys
request = json.load(open(sys.argv[1]))["request"]
review = json.load(open(sys.argv[2]))
r = review["response"]
assert review["kind"] == "AdmissionReview", review
assert r["uid"] == request["uid"], (r["uid"], request["uid"])
assert r["allowed"] is True, r
assert r["patchType"] == "JSONPatch", r
patch = json.loads(base64.b64decode(r["patch"]))
assert [op["path"] for op in patch] == ["/data/cloud.conf"], patch
conf = base64.b64decode(patch[0]["value"]).decode()
assert "provider-requires-serial-api-calls" in conf, conf
print(f"  allowed, uid {r['uid']}, JSONPatch on /data/cloud.conf sets provider-requires-serial-api-calls")
PY

step "the running container: uid 65532, NoNewPrivs, no capability, read-only /, no shell"
status="$(cat "/proc/$PID/status")"
grep -qE '^Uid:\s+65532\s+65532\s+65532\s+65532$' <<<"$status" || fail "process uids: $(grep ^Uid <<<"$status")"
grep -qE '^Gid:\s+65532\s+65532\s+65532\s+65532$' <<<"$status" || fail "process gids: $(grep ^Gid <<<"$status")"
grep -qE '^NoNewPrivs:\s+1$' <<<"$status" || fail "NoNewPrivs is not set"
grep -qE '^CapEff:\s+0+$' <<<"$status" || fail "effective capabilities: $(grep ^CapEff <<<"$status")"
# mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ..." for the container's /
awk '$5 == "/" { print $6 }' "/proc/$PID/mountinfo" | grep -qE '(^|,)ro(,|$)' || fail "the root filesystem is not read-only"
if runc exec "$CONTAINER" /bin/sh -c true >/dev/null 2>&1; then
    fail "runc exec /bin/sh worked: the image has a shell"
fi
echo "  ok"

cleanup
trap - EXIT

LAYER_BYTES="$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]));print(sum(l["size"] for l in m["layers"]))' \
    "$OUT/layout/blobs/sha256/${DIGEST1#sha256:}")"
UNPACKED_BYTES="$(du -sb "$OUT/rootfs" | cut -f1)"
BINARY_BYTES="$(stat -c %s "$BINARY")"
{
    echo "image $DIGEST1 ($ARCH)"
    echo "compressed layer bytes: $LAYER_BYTES"
    echo "unpacked bytes: $UNPACKED_BYTES (binary $BINARY_BYTES)"
    echo "start to ready ms: $START_TO_READY_MS"
} | tee "$OUT/report.txt"
step "image ok"
