"""The user docs stay short enough to read: README.md and docs/ without docs/dev at most
150,000 bytes; the newcomer's path (README, tutorial, the sidecar and consumer how-tos) at most
40,000; and no dated journal lines in them (those belong in commits, the CHANGELOG, docs/dev).
Prints what is over; exits 1 if anything is.

    python3 scripts/lib/doc_budget.py [ROOT]
"""
import glob
import os
import re
import sys

USER_DOCS_MAX = 150_000
NEWCOMER_MAX = 40_000
NEWCOMER = ["README.md", "docs/tutorial.md", "docs/how-to/deploy-sidecar-helm.md", "docs/how-to/consume.md"]

os.chdir(sys.argv[1] if len(sys.argv) > 1 else ".")
pages = ["README.md"] + sorted(
    p for p in glob.glob("docs/**/*.md", recursive=True) if not p.startswith("docs/dev/")
)
size = {p: os.path.getsize(p) for p in pages}
problems = []
total = sum(size.values())
if total > USER_DOCS_MAX:
    largest = ", ".join(f"{p} {size[p]:,}" for p in sorted(pages, key=size.get, reverse=True)[:5])
    problems.append(f"user docs are {total:,} bytes, over {USER_DOCS_MAX:,} (largest: {largest})")
path = sum(size[p] for p in NEWCOMER)
if path > NEWCOMER_MAX:
    problems.append(f"the newcomer's path ({', '.join(NEWCOMER)}) is {path:,} bytes, over {NEWCOMER_MAX:,}")
for p in pages:
    for n, line in enumerate(open(p, encoding="utf-8"), 1):
        if re.search(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]", line):
            problems.append(f"{p}:{n}: a dated line in the user docs: {line.strip()[:80]}")
for problem in problems:
    print(f"doc_budget: {problem}")
if not problems:
    print(f"doc_budget: user docs {total:,} bytes (at most {USER_DOCS_MAX:,}), newcomer's path {path:,} (at most {NEWCOMER_MAX:,})")
sys.exit(1 if problems else 0)
