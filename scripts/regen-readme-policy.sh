#!/usr/bin/env bash
# Regenerates README.md's status model section (between the `kim policy` markers) from
# `kim policy`; a test fails while the two differ.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q -- policy > target/policy.md
python3 - <<'PY'
import re
readme = open("README.md").read()
md = open("target/policy.md").read()
begin, end = "<!-- BEGIN kim policy -->\n", "<!-- END kim policy -->"
i = readme.index(begin) + len(begin)
j = readme.index(end, i)
open("README.md", "w").write(readme[:i] + md + readme[j:])
PY
