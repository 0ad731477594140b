#!/usr/bin/env python3
"""A small `helm lint` / `helm template` for scripts/check-deploy.

There is no helm binary on the machines (no Debian package; the project reaches only package
registries), so this drives Helm's own Go SDK (v4) through helm-python-sdk, a PyPI wheel that
bundles it as libhelm_c.so. Same chart loader, template engine, Sprig functions, `fail`,
`.Files` and values.schema.json validation as the helm CLI.

  helm.py lint CHART [-f VALUES]...          exit 1 on any error (or warning with --strict)
  helm.py template CHART [-f VALUES]... [--name N] [--namespace NS]
                                             multi-document YAML on stdout, exit 1 on failure
  helm.py version
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import helm_python as helm
import yaml

SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}


def merged_values(files: list[str]) -> dict:
    """Merge -f files left to right, like helm (maps deep-merged, later wins)."""

    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = value
        return out

    values: dict = {}
    for name in files:
        values = merge(values, yaml.safe_load(Path(name).read_text()) or {})
    return values


def cmd_lint(args: argparse.Namespace) -> int:
    report = helm.lint(args.chart, merged_values(args.values), strict=args.strict, namespace=args.namespace)
    failed = False
    for message in report.get("messages") or []:
        severity = SEVERITY.get(message.get("severity"), "?")
        print(f"[{severity}] {message.get('path', '')}: {message.get('error', '')}")
        if message.get("severity") == 3 or (args.strict and message.get("severity") == 2):
            failed = True
    for error in report.get("errors") or []:
        print(f"[ERROR] {error}")
        failed = True
    linted = report.get("total_charts_linted", 0)
    print(f"{linted} chart(s) linted, {'FAILED' if failed else 'no failures'}")
    return 1 if failed or linted == 0 else 0


def cmd_template(args: argparse.Namespace) -> int:
    values = merged_values(args.values)
    try:
        with helm.Chart.load(args.chart) as chart:
            # `helm template`/`install` validate against values.schema.json; do it explicitly
            # so a schema failure is reported as such.
            chart.validate_schema(values)
            manifests = chart.render(values, name=args.name, namespace=args.namespace, is_install=True)
    except helm.HelmError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    out = []
    for path in sorted(manifests):
        text = manifests[path]
        if path.endswith("NOTES.txt") or not text.strip():
            continue
        # One file may hold several documents; drop the empty ones, like helm does.
        for doc in text.split("\n---"):
            if doc.strip() and any(line.strip() and not line.lstrip().startswith("#") for line in doc.splitlines()):
                out.append(f"---\n# Source: {path}\n{doc.strip(chr(10))}\n")
    sys.stdout.write("".join(out))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="helm.py")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("lint", "template"):
        p = sub.add_parser(name)
        p.add_argument("chart")
        p.add_argument("-f", "--values", action="append", default=[])
        p.add_argument("--namespace", default="handoff-ci")
        if name == "lint":
            p.add_argument("--strict", action="store_true")
        else:
            p.add_argument("--name", default="release")
    sub.add_parser("version")
    args = parser.parse_args()
    if args.command == "version":
        print(f"helm SDK {helm.helm_sdk_version()} via helm-c {helm.helm_c_version()}")
        return 0
    return cmd_lint(args) if args.command == "lint" else cmd_template(args)


if __name__ == "__main__":
    sys.exit(main())
