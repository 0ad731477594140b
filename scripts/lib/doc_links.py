"""Every relative link in README.md and docs/ resolves inside the repository, anchors included:
a user of the project has only the repository, and a heading renamed must take its links along.
Anchors are GitHub's: the heading lower-cased, punctuation but `-` and `_` dropped, spaces as `-`,
a repeated heading numbered. Prints each broken link; exits 1 if there is one.

    python3 scripts/lib/doc_links.py [ROOT]
"""
import os, re, glob, sys
top = sys.argv[1] if len(sys.argv) > 1 else "."
os.chdir(top)
def slug(h):
    h = h.strip().lower()
    h = re.sub(r"[`*_]", lambda m: "" if m.group(0) != "_" else "_", h)
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")
anchors = {}
files = ["README.md"] + glob.glob("docs/**/*.md", recursive=True)
for f in files:
    s = set(); inblock = False; seen = {}
    for line in open(f):
        if line.startswith("```"): inblock = not inblock
        if not inblock and re.match(r"#{1,6} ", line):
            a = slug(re.sub(r"^#+ ", "", line))
            n = seen.get(a, 0); seen[a] = n + 1
            s.add(a if n == 0 else f"{a}-{n}")
        for m in re.findall(r'<a (?:name|id)="([^"]+)"', line): s.add(m)
    anchors[os.path.normpath(f)] = s
bad = 0
for f in files:
    inblock = False
    for n, line in enumerate(open(f), 1):
        if line.startswith("```"): inblock = not inblock
        if inblock: continue
        for link in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", link): continue
            path, _, frag = link.partition("#")
            target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else os.path.normpath(f)
            if not os.path.exists(target):
                print(f"{f}:{n}: missing file {link}"); bad += 1; continue
            if frag and target.endswith(".md") and frag not in anchors.get(target, set()):
                print(f"{f}:{n}: missing anchor {link}"); bad += 1
sys.exit(1 if bad else 0)
