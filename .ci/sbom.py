#!/usr/bin/env python3
"""Writes a CycloneDX 1.5 JSON SBOM of the stackgate image: the crates from Cargo.lock that
the `stackgate` binary links (normal dependencies for one target, as `cargo metadata` resolves
them; dev- and build-only crates are not in the binary and not listed) with their Cargo.lock
checksums, plus the Debian packages the image's files come from (scripts/image-rootfs.sh's
package list). Deterministic: no clock, serial number derived from the content.

    sbom.py --target x86_64-unknown-linux-gnu --packages target/image/packages.txt \
        --version 0.1.0 --out sbom.cdx.json

Used by .github/workflows/release.yml (attached to the image with `cosign attest`) and run
by .ci/image.sh on the image CI builds.
"""

import argparse
import hashlib
import json
import subprocess
import sys
import tomllib
import uuid


def cargo_metadata(target):
    out = subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", target],
        check=True,
        capture_output=True,
    ).stdout
    return json.loads(out)


def linked_packages(meta, root_name):
    """Package ids reachable from `root_name` through normal (not dev, not build) edges."""
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    pkgs = {p["id"]: p for p in meta["packages"]}
    roots = [pid for pid, p in pkgs.items() if p["name"] == root_name and pid in meta["workspace_members"]]
    if len(roots) != 1:
        sys.exit(f"sbom: expected one workspace package named {root_name}, found {len(roots)}")
    seen, todo = set(), [roots[0]]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return roots[0], [pkgs[pid] for pid in seen]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True)
    p.add_argument("--packages", required=True, help="name:arch=version lines (image-rootfs.sh)")
    p.add_argument("--version", required=True)
    p.add_argument("--lock", default="Cargo.lock")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    with open(a.lock, "rb") as f:
        lock = tomllib.load(f)
    checksums = {(pk["name"], pk["version"]): pk.get("checksum") for pk in lock["package"]}

    meta = cargo_metadata(a.target)
    root, packages = linked_packages(meta, "stackgate")
    components = []
    for pkg in sorted(packages, key=lambda p: (p["name"], p["version"])):
        if pkg["id"] == root:
            continue
        key = (pkg["name"], pkg["version"])
        if key not in checksums:
            sys.exit(f"sbom: {pkg['name']} {pkg['version']} is not in {a.lock}")
        comp = {"type": "library", "name": pkg["name"], "version": pkg["version"]}
        if pkg.get("source", "") and pkg["source"].startswith("registry+"):
            comp["purl"] = f"pkg:cargo/{pkg['name']}@{pkg['version']}"
            comp["bom-ref"] = comp["purl"]
            if checksums[key]:
                comp["hashes"] = [{"alg": "SHA-256", "content": checksums[key]}]
        else:
            # a crate of this repository (path dependency): part of the same source tree
            comp["bom-ref"] = f"stackgate-workspace:{pkg['name']}@{pkg['version']}"
        if pkg.get("license"):
            comp["licenses"] = [{"expression": pkg["license"]}]
        components.append(comp)

    with open(a.packages) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            name_arch, sep, version = line.partition("=")
            name, _, arch = name_arch.partition(":")
            if not sep or not name or not arch or not version:
                sys.exit(f"sbom: {a.packages}: '{line}' is not name:arch=version")
            purl = f"pkg:deb/debian/{name}@{version}?arch={arch}"
            components.append({"type": "library", "name": name, "version": version, "purl": purl, "bom-ref": purl})

    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "component": {
                "type": "application",
                "name": "stackgate",
                "version": a.version,
                "bom-ref": f"pkg:oci/stackgate@{a.version}",
                "licenses": [{"expression": "Apache-2.0"}],
            },
            "tools": {"components": [{"type": "application", "name": ".ci/sbom.py"}]},
        },
        "components": components,
    }
    body = json.dumps(bom, sort_keys=True, separators=(",", ":")).encode()
    bom["serialNumber"] = uuid.UUID(bytes=hashlib.sha256(body).digest()[:16], version=5).urn
    with open(a.out, "w") as f:
        json.dump(bom, f, sort_keys=True, indent=1)
        f.write("\n")
    crates = sum(1 for c in components if c.get("purl", "").startswith("pkg:cargo/"))
    print(f"sbom: {a.out}: {crates} crates, {len(components) - crates} other components", file=sys.stderr)


if __name__ == "__main__":
    main()
