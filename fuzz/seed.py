#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the test fixtures (run from the repository root).

cloudconf_* and review_cloudconf: the gcfg fixtures and every cloud config in the captured
reviews (ConfigMap data, Secret data decoded, stringData); cloudconf_edit prefixes each with
a few (section/key, value) selector bytes. review: every captured AdmissionReview.
Files are named by SHA-1 of their content, as libFuzzer does. Existing files are kept.
"""
import base64, glob, hashlib, json, os

ROOT = os.getcwd()
CAPTURED = os.path.join(ROOT, "tests/fixtures/captured")


def put(target, data):
    d = os.path.join(ROOT, "fuzz/corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


configs = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/cloudconf/*")))]
reviews = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(CAPTURED, "**/*.json"), recursive=True))]
for raw in reviews:
    req = json.loads(raw).get("request", {})
    for which in ("object", "oldObject"):
        obj = req.get(which) or {}
        for v in (obj.get("data") or {}).values():
            if obj.get("kind") == "Secret":
                try:
                    configs.append(base64.b64decode(v))
                except Exception:
                    pass
            elif isinstance(v, str):
                configs.append(v.encode())
        for v in (obj.get("stringData") or {}).values():
            configs.append(v.encode())
configs = sorted(set(c for c in configs if b"[" in c))
for c in configs:
    put("cloudconf_roundtrip", c)
    put("review_cloudconf", c)
    for pick, value in ((0, 0), (9, 1), (17, 7), (26, 12), (4, 255)):
        put("cloudconf_edit", bytes([pick, value]) + c)
for r in reviews:
    put("review", r)

# yaml_values: every YAML values string in the captured reviews and the GitOps fixtures,
# and the hostile shapes the YAML reader bounds (alias bombs, deep nesting, merge keys).
values = []
for raw in reviews:
    obj = (json.loads(raw).get("request") or {}).get("object") or {}
    spec = obj.get("spec") or {}
    if isinstance(spec.get("valuesContent"), str):
        values.append(spec["valuesContent"].encode())
    for src in [spec.get("source") or {}] + list(spec.get("sources") or []):
        helm = src.get("helm") or {}
        if isinstance(helm.get("values"), str):
            values.append(helm["values"].encode())
for p in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/gitops/**/*.yaml"), recursive=True)):
    values.append(open(p, "rb").read())
laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
values += [s.encode() for s in [
    laughs,
    "base: &b {x: 1, z: 2}\nover:\n  <<: *b\n  z: 3\n",
    "a: &a [1, 2]\nb: [*a, *a]\nc: {<<: [*a]}\n",
    "&x [" * 40 + "0" + "]" * 40,
    "[" * 300 + "]" * 300,
    "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 60)),
    "a: 1\r\nb:\r\n\t- x\r\n",
    "---\na: 1\n---\n---\nb: *c\n",
    "s: &s " + "x" * 200 + "\nt: [*s, *s, *s, *s]\n",
    "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: &f false\n  global: {x: *f}\n",
]]
for v in sorted(set(values)):
    put("yaml_values", v)
# review_values: bytes of the stack machine in fuzz/checks.rs (values_from_bytes).
for seed in [b"", b"\x04\x0c\x00\x04\x1c\x06", b"\x00" * 64 + b"\x07", b"\x01" * 40 + b"\x07" + b"\x02" * 40,
             b"\x05\x07" * 200, b"\x04\x0c\x00\x04\x14\x07\x04\x24\x06"]:
    put("review_values", seed)
