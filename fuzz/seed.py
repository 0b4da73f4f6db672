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
