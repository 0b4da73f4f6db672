#!/usr/bin/env python3
"""Writes an OCI image layout (image-spec v1.0) holding one single-layer image of ROOTFS.

No daemon and no registry: the layer is a tar built here, so its bytes are fixed by the tree
and the arguments alone. Entries are sorted by path; owner 0:0 with no user/group names;
mtime SOURCE_DATE_EPOCH; modes as on disk (masked to 0o7777); gzip with mtime 0 and no file
name. JSON is written with sorted keys and no spaces. Two runs on the same tree give the same
manifest digest (.ci/image.sh checks that).

    oci-layout.py ROOTFS LAYOUT --tag T --arch A --epoch N --label K=V ... \
        --user 65532:65532 --entrypoint /usr/local/bin/stackgate --cmd serve --port 8443 ...

Prints the manifest digest (sha256:...) on stdout.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def layer_tar(rootfs, epoch):
    """The rootfs as an uncompressed tar: parents before children, names sorted."""
    paths = []
    for dirpath, dirnames, filenames in os.walk(rootfs):
        dirnames.sort()
        for name in dirnames + sorted(filenames):
            paths.append(os.path.join(dirpath, name))
    paths.sort(key=lambda p: os.path.relpath(p, rootfs).split(os.sep))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            rel = os.path.relpath(path, rootfs)
            st = os.lstat(path)
            info = tarfile.TarInfo(rel)
            info.mode = stat.S_IMODE(st.st_mode)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            elif stat.S_ISLNK(st.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                tar.addfile(info)
            else:
                sys.exit(f"oci-layout: {rel} is neither a file, a directory nor a symlink")
    return buf.getvalue()


def write_blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return "sha256:" + digest


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rootfs")
    p.add_argument("layout")
    p.add_argument("--tag", required=True)
    p.add_argument("--arch", required=True, choices=["amd64", "arm64"])
    p.add_argument("--epoch", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--entrypoint", action="append", required=True)
    p.add_argument("--cmd", action="append", default=[])
    p.add_argument("--port", action="append", default=[])
    p.add_argument("--label", action="append", default=[])
    a = p.parse_args()

    if not os.path.isdir(a.rootfs):
        sys.exit(f"oci-layout: {a.rootfs} is not a directory")
    labels = {}
    for kv in a.label:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            sys.exit(f"oci-layout: --label wants KEY=VALUE, got {kv!r}")
        labels[key] = value
    created = datetime.datetime.fromtimestamp(a.epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    os.makedirs(os.path.join(a.layout, "blobs", "sha256"), exist_ok=False)
    with open(os.path.join(a.layout, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))

    tar = layer_tar(a.rootfs, a.epoch)
    gz = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=gz, mode="wb", compresslevel=9, mtime=0) as z:
        z.write(tar)
    layer = gz.getvalue()
    layer_digest = write_blob(a.layout, layer)

    config = {
        "architecture": a.arch,
        "os": "linux",
        "created": created,
        "config": {
            "User": a.user,
            "Entrypoint": a.entrypoint,
            "Cmd": a.cmd,
            "ExposedPorts": {f"{port}/tcp": {} for port in a.port},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
        "history": [{"created": created, "created_by": "scripts/image-rootfs.sh + .ci/oci-layout.py"}],
    }
    config_bytes = canonical(config)
    config_digest = write_blob(a.layout, config_bytes)

    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": len(layer),
            }
        ],
        "annotations": {"org.opencontainers.image.created": created},
    }
    manifest_bytes = canonical(manifest)
    manifest_digest = write_blob(a.layout, manifest_bytes)

    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": a.arch, "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": a.tag},
            }
        ],
    }
    with open(os.path.join(a.layout, "index.json"), "wb") as f:
        f.write(canonical(index))
    print(manifest_digest)


if __name__ == "__main__":
    main()
