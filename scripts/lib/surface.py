"""The library's public surface stays small: `pub` items (lines declaring a `pub` fn, struct,
enum, trait, type, const, static, mod or use, as issue 56 counts them) in src/ at most 300.
What the binary, the benchmark, the chaos harness, the fuzz targets and the tests do not use is
`pub(crate)`. Prints the count; exits 1 over the limit, naming the files with the most.

    python3 scripts/lib/surface.py [SRC]
"""
import collections
import os
import re
import sys

LIMIT = 300
PUB = re.compile(r"^\s*pub (async fn|fn|struct|enum|trait|type|const|static|mod|use)\b")

src = sys.argv[1] if len(sys.argv) > 1 else "src"
per_file = collections.Counter()
for root, _, files in os.walk(src):
    for name in files:
        if name.endswith(".rs"):
            path = os.path.join(root, name)
            per_file[path] = sum(1 for line in open(path, encoding="utf-8") if PUB.match(line))
total = sum(per_file.values())
if total > LIMIT:
    most = ", ".join(f"{p} {n}" for p, n in per_file.most_common(5))
    print(f"surface: {total} pub items in {src}, over {LIMIT} (most: {most})")
    sys.exit(1)
print(f"surface: {total} pub items in {src} (at most {LIMIT})")
