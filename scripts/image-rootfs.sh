#!/usr/bin/env bash
# Assembles the stackgate image's root filesystem in OUT from a built binary and this
# machine's Debian packages. Both image builds use it: `.ci/image.sh` (no daemon, OCI layout
# written directly, what CI starts with runc) and the Dockerfile (a `FROM scratch` stage that
# copies OUT), so the two filesystems come from one list.
#
#   scripts/image-rootfs.sh BINARY OUT [PACKAGES_OUT]
#
# What goes in, and why each file is there (nothing else: no shell, no package manager):
#   usr/local/bin/stackgate              the binary
#   the libraries `ldd BINARY` names     glibc's loader, libc, libm, libgcc_s for a Rust binary
#                                        (copied as files at the paths the binary asks for)
#   etc/ssl/certs/ca-certificates.crt    Mozilla's roots from Debian's ca-certificates package:
#                                        the control-plane guard calls Keystone and Octavia over
#                                        HTTPS with the system roots (rustls-native-certs)
#   etc/nsswitch.conf                    "hosts: files dns": /etc/hosts (which the kubelet
#                                        writes) before DNS, as in glibc-based base images
# Not included: /etc/passwd and /etc/group. The image runs as the numeric user 65532, the
# binary looks up no user or group names, and kube-rs reads its in-cluster config first.
#
# Reproducible: files come from Debian packages, whose name=version pairs are written to
# PACKAGES_OUT (the image records them as a label), so the same packages and binary give the
# same tree; every mtime is SOURCE_DATE_EPOCH (default: 0); owners are root, modes fixed.
# The CA bundle is built from the package's files, not from /etc/ssl/certs, so local CAs of
# the building machine never end up in the image. Fails loudly; never skips.
set -euo pipefail

die() {
    echo "image-rootfs: ERROR: $*" >&2
    exit 1
}

[[ $# -ge 2 && $# -le 3 ]] || die "usage: $0 BINARY OUT [PACKAGES_OUT]"
BINARY="$1"
OUT="$2"
PACKAGES_OUT="${3:-}"
EPOCH="${SOURCE_DATE_EPOCH:-0}"
[[ "$EPOCH" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be a number of seconds, got '$EPOCH'"
[[ -f "$BINARY" && -x "$BINARY" ]] || die "$BINARY is not an executable file"
for tool in ldd dpkg-query install; do
    command -v "$tool" >/dev/null || die "$tool is not installed"
done
export LC_ALL=C

rm -rf "$OUT"
mkdir -p "$OUT"
umask 022

install -D -m 0755 "$BINARY" "$OUT/usr/local/bin/stackgate"

# `ldd` lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", the loader as
# "/lib64/ld-linux-x86-64.so.2 (0x...)", the kernel's vDSO with no file.
LDD="$(ldd "$BINARY" 2>&1)" || die "ldd $BINARY failed: $LDD"
if grep -q 'not found' <<<"$LDD"; then
    die "a library of $BINARY is missing on this machine: $LDD"
fi
mapfile -t LIBS < <(sed -n -e 's/^.*=> \(\/[^ ]*\) (0x.*$/\1/p' -e 's/^[[:space:]]*\(\/[^ ]*\) (0x.*$/\1/p' <<<"$LDD" | sort -u)
[[ ${#LIBS[@]} -gt 0 ]] || die "ldd named no library for $BINARY (a static binary needs no image libraries; this script expects glibc): $LDD"

PACKAGES=()
for lib in "${LIBS[@]}"; do
    real="$(readlink -f "$lib")"
    # The mode of the file itself (the loader and libc are executable in Debian).
    install -D -m "$(stat -c %a "$real")" "$real" "$OUT$lib"
    # dpkg knows either the path asked for or the resolved one (merged /usr).
    owner="$(dpkg-query -S "$lib" 2>/dev/null || dpkg-query -S "$real" 2>/dev/null)" ||
        die "no Debian package owns $lib ($real): the image takes files from packages only"
    PACKAGES+=("${owner%%:*}")
done

CA_DIR=/usr/share/ca-certificates/mozilla
compgen -G "$CA_DIR/*.crt" >/dev/null || die "$CA_DIR/*.crt not found: install Debian's ca-certificates package"
mkdir -p "$OUT/etc/ssl/certs"
# Sorted by name (C locale): the same package gives the same bundle.
find "$CA_DIR" -maxdepth 1 -name '*.crt' -print0 | sort -z | xargs -0 cat >"$OUT/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$OUT/etc/ssl/certs/ca-certificates.crt"
PACKAGES+=(ca-certificates)

printf 'hosts: files dns\n' >"$OUT/etc/nsswitch.conf"
chmod 0644 "$OUT/etc/nsswitch.conf"

# Owners and times: root, SOURCE_DATE_EPOCH; directories 0755.
find "$OUT" -type d -exec chmod 0755 {} +
chown -R 0:0 "$OUT" 2>/dev/null || [[ "$(id -u)" != 0 ]] || die "chown failed"
find "$OUT" -exec touch -h -d "@$EPOCH" {} +

if [[ -n "$PACKAGES_OUT" ]]; then
    mapfile -t NAMES < <(printf '%s\n' "${PACKAGES[@]}" | sort -u)
    for name in "${NAMES[@]}"; do
        version="$(dpkg-query -W -f '${Version}' "$name")" || die "dpkg-query -W $name"
        arch="$(dpkg-query -W -f '${Architecture}' "$name")"
        printf '%s:%s=%s\n' "$name" "$arch" "$version"
    done >"$PACKAGES_OUT"
fi
echo "image-rootfs: $(find "$OUT" -type f | wc -l) files in $OUT" >&2
