#!/usr/bin/env python3
"""Structural checks on rendered manifests, used by scripts/check-deploy.

  checks.py render MANIFEST --case NAME --kinds K1,K2 [--owner] [--handoff-bin PATH]
      hardening and wiring of the handoff container/pod, the ConfigMap's handoff.toml
      (parsed; optionally loaded by the real handoff binary), expected object kinds
  checks.py crds MANIFEST OUTDIR --rules OPS_RULES
      writes OUTDIR/crds.json (for the CRD schema validator) and OUTDIR/rules-N.yaml (each
      PrometheusRule's spec, for promtool); checks the embedded rules equal OPS_RULES
  checks.py dashboard JSON OUTFILE
      dashboard structure; writes its PromQL as recording rules for `promtool check rules`
  checks.py container-config TOML --handoff-bin PATH
      the image's config/container.toml through handoff's loader
Exit status 1 with one line per problem.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import yaml

problems: list[str] = []


def check(ok: bool, message: str) -> None:
    if not ok:
        problems.append(message)


def load(path: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def duration_seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not m:
        raise ValueError(f"bad duration {text!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def loader_check(toml_text: str, handoff_bin: str, what: str) -> None:
    """Runs `handoff check` on the config: exit 2 / 'invalid configuration' means the loader
    rejected it; anything else after parsing (here: the unreachable database) is fine."""
    # Admin token files come from Secrets mounted in the pod; the loader reads them, so a
    # stand-in (a token long enough to be accepted) takes their place here.
    with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as token:
        token.write("stand-in-token-for-the-loader-check\n")
    toml_text = re.sub(r'(?m)^(\s*token_file\s*=\s*)"[^"]*"', lambda m: f'{m.group(1)}"{token.name}"', toml_text)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(toml_text)
    env = {
        "PATH": "/usr/bin:/bin",
        # Port 1 refuses at once: the run stops right after the config is accepted.
        "HANDOFF_DATABASE__URL": "postgres://check@127.0.0.1:1/check",
        # A config with a [redis.tls] table needs a TLS URL.
        "HANDOFF_REDIS__URL": "rediss://127.0.0.1:1" if "[redis.tls]" in toml_text else "redis://127.0.0.1:1",
        # …and nothing waits for long (these keys are valid overrides, so loaded as well).
        "HANDOFF_DATABASE__CONNECT_TIMEOUT": "1s",
        "HANDOFF_REDIS__COMMAND_TIMEOUT": "200ms",
    }
    try:
        run = subprocess.run([handoff_bin, "check", "--config", f.name], env=env, capture_output=True, text=True,
                             timeout=60)
    finally:
        os.unlink(f.name)
        os.unlink(token.name)
    out = run.stdout + run.stderr
    check("invalid configuration" not in out and run.returncode in (0, 1),
          f"{what}: handoff's config loader rejected it (exit {run.returncode}): {out.strip()}")


# ---------------------------------------------------------------------------------------------
def cmd_render(args: argparse.Namespace) -> None:
    docs = load(args.manifest)
    kinds = sorted(d["kind"] for d in docs)
    expected = sorted(k for k in args.kinds.split(",") if k)
    check(kinds == expected, f"{args.case}: rendered kinds {kinds}, expected {expected}")
    for d in docs:
        check(bool(d.get("metadata", {}).get("namespace")), f"{d['kind']}/{d['metadata'].get('name')}: no namespace")

    # The migration Job's ConfigMap (a hook) holds the same handoff.toml; checked with its Job.
    hooks = [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap" and d not in hooks}
    handoff_cms = {n: d for n, d in configmaps.items() if "handoff.toml" in d.get("data", {})}
    check(len(handoff_cms) == 1, f"{args.case}: expected one ConfigMap with handoff.toml, got {list(handoff_cms)}")
    config: dict = {}
    for name, cm in handoff_cms.items():
        text = cm["data"]["handoff.toml"]
        try:
            config = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            check(False, f"ConfigMap {name}: handoff.toml is not valid TOML: {e}")
            continue
        tel, shut = config.get("telemetry", {}), config.get("shutdown", {})
        check(tel.get("listen", "").startswith("0.0.0.0:"), f"ConfigMap {name}: telemetry.listen must be 0.0.0.0:PORT")
        check(tel.get("log_format") == "json", f"ConfigMap {name}: telemetry.log_format should be json")
        check("grace_period" in shut, f"ConfigMap {name}: shutdown.grace_period missing")
        for section in ("database", "redis"):
            for key in ("url", "url_file"):
                check(key not in config.get(section, {}),
                      f"ConfigMap {name}: {section}.{key} in the ConfigMap; URLs come from Secrets")
        check(any(config.get(k) for k in ("relay", "bridge", "worker")),
              f"ConfigMap {name}: no [[relay]], [[bridge]] or [[worker]]: handoff would have nothing to do")
        if args.handoff_bin:
            loader_check(text, args.handoff_bin, f"ConfigMap {name}")
    listen_port = int(config.get("telemetry", {}).get("listen", ":0").rsplit(":", 1)[1] or 0)
    grace = duration_seconds(config.get("shutdown", {}).get("grace_period", "0s"))

    deployments = [d for d in docs if d["kind"] == "Deployment"]
    found_handoff = 0
    for dep in deployments:
        name = f"Deployment/{dep['metadata']['name']}"
        pod = dep["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        check(pod.get("automountServiceAccountToken") is False, f"{name}: automountServiceAccountToken must be false")
        check(pod.get("enableServiceLinks") is False, f"{name}: enableServiceLinks must be false")
        tgps = pod.get("terminationGracePeriodSeconds", 30)
        check(tgps > grace, f"{name}: terminationGracePeriodSeconds {tgps} must exceed shutdown.grace_period {grace}s")
        psc = pod.get("securityContext", {})
        check(psc.get("runAsNonRoot") is True, f"{name}: pod securityContext.runAsNonRoot must be true")
        check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{name}: pod seccompProfile RuntimeDefault")
        annotations = dep["spec"]["template"]["metadata"].get("annotations", {})
        check("checksum/handoff-config" in annotations, f"{name}: pod annotation checksum/handoff-config missing")
        init = [(c, True) for c in pod.get("initContainers", [])]
        for c, is_init in [(c, False) for c in pod["containers"]] + init:
            # The handoff container: its image's repository ends in /handoff.
            if c["image"].split("@")[0].rsplit("/", 1)[-1].split(":")[0] != "handoff":
                continue
            found_handoff += 1
            where = f"{name} {'init container' if is_init else 'container'} {c['name']}"
            if is_init:
                check(c.get("restartPolicy") == "Always",
                      f"{where}: an init container must be a native sidecar (restartPolicy: Always)")
            if args.native is not None:
                check(is_init == args.native, f"{where}: expected a {'native' if args.native else 'plain'} sidecar")
            start = c.get("startupProbe", {}).get("httpGet", {})
            check(start.get("path") == "/healthz" and start.get("port") == "handoff-metrics", f"{where}: startup /healthz")
            sc = c.get("securityContext", {})
            check(sc.get("runAsNonRoot") is True, f"{where}: securityContext.runAsNonRoot must be true")
            check(isinstance(sc.get("runAsUser"), int) and sc["runAsUser"] > 0, f"{where}: numeric non-root runAsUser")
            check(sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem must be true")
            check(sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation must be false")
            check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: capabilities.drop must be [ALL]")
            check(sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: seccompProfile RuntimeDefault")
            tag = c["image"].split("@")[0].rsplit(":", 1)[1]
            check(tag != "latest", f"{where}: image tag latest")
            check(c.get("imagePullPolicy") == "IfNotPresent", f"{where}: imagePullPolicy should be IfNotPresent")
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            check(ports.get("handoff-metrics") == listen_port,
                  f"{where}: port handoff-metrics {ports.get('handoff-metrics')} != telemetry.listen port {listen_port}")
            live = c.get("livenessProbe", {}).get("httpGet", {})
            check(live.get("path") == "/healthz" and live.get("port") == "handoff-metrics", f"{where}: liveness /healthz")
            ready = c.get("readinessProbe", {}).get("httpGet", {})
            if args.owner:
                check(not ready, f"{where}: a sidecar must not gate the owner pod's readiness by default")
            else:
                check(ready.get("path") == "/readyz" and ready.get("port") == "handoff-metrics", f"{where}: readiness /readyz")
            res = c.get("resources", {})
            for kind in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    check(r in res.get(kind, {}), f"{where}: resources.{kind}.{r} missing")
            env = {e["name"]: e for e in c.get("env", [])}
            db = env.get("HANDOFF_DATABASE__URL")
            db_file = env.get("HANDOFF_DATABASE__URL_FILE")
            check(bool(db) != bool(db_file), f"{where}: exactly one of HANDOFF_DATABASE__URL / _URL_FILE")
            for e in env.values():
                if e["name"].endswith("__URL"):
                    check("secretKeyRef" in e.get("valueFrom", {}), f"{where}: {e['name']} must come from a secretKeyRef")
            mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
            cfg = mounts.get("/etc/handoff")
            check(bool(cfg) and cfg.get("readOnly") is True, f"{where}: /etc/handoff must be a read-only mount")
            if cfg:
                cm = volumes.get(cfg["name"], {}).get("configMap", {}).get("name")
                check(cm in handoff_cms, f"{where}: /etc/handoff volume's ConfigMap {cm} is not the rendered one")
            if db_file:
                sec = mounts.get("/var/run/secrets/handoff")
                check(bool(sec) and sec.get("readOnly") is True, f"{where}: secret files mount missing")
                check(db_file["value"].startswith("/var/run/secrets/handoff/"), f"{where}: URL file outside the mount")
    if deployments:
        check(found_handoff == 1, f"{args.case}: expected one handoff container, found {found_handoff}")
    for sa in (d for d in docs if d["kind"] == "ServiceAccount"):
        check(sa.get("automountServiceAccountToken") is False, f"ServiceAccount/{sa['metadata']['name']}: token automount")
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        network_policy(policy)
    for job in (d for d in docs if d["kind"] == "Job"):
        migration_job(job, hooks, args.handoff_bin)


def migration_job(job: dict, hooks: list[dict], handoff_bin: str | None) -> None:
    """The migration Job: a pre-install/pre-upgrade hook after its own ConfigMap, hardened like
    the Deployment, reading its URL from a mounted Secret file, running `handoff migrate`."""
    name = f"Job/{job['metadata']['name']}"
    check(job in hooks and "pre-install" in job["metadata"]["annotations"]["helm.sh/hook"], f"{name}: not a pre-install hook")
    pod = job["spec"]["template"]["spec"]
    check(pod.get("restartPolicy") == "Never", f"{name}: restartPolicy Never")
    check(pod.get("automountServiceAccountToken") is False, f"{name}: automountServiceAccountToken must be false")
    check(pod.get("securityContext", {}).get("runAsNonRoot") is True, f"{name}: pod runAsNonRoot")
    (container,) = pod["containers"]
    check(container["args"][:1] == ["migrate"], f"{name}: runs {container['args']}, not handoff migrate")
    sc = container.get("securityContext", {})
    check(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False,
          f"{name}: container not hardened")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    url_file = env.get("HANDOFF_DATABASE__URL_FILE") or ""
    mounts = [m["mountPath"] for m in container.get("volumeMounts", []) if m.get("readOnly")]
    check(any(url_file.startswith(m + "/") for m in mounts), f"{name}: the URL file is not on a read-only mount")
    config_volume = next(v for v in pod["volumes"] if v["name"] == "handoff-config")["configMap"]["name"]
    hook_maps = {d["metadata"]["name"]: d for d in hooks if d["kind"] == "ConfigMap"}
    check(config_volume in hook_maps, f"{name}: its config is not a hook ConfigMap (the release's does not exist yet)")
    weight = lambda d: int(d["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))  # noqa: E731
    if config_volume in hook_maps:
        check(weight(hook_maps[config_volume]) < weight(job), f"{name}: its ConfigMap must come first (hook weight)")
        if handoff_bin:
            loader_check(hook_maps[config_volume]["data"]["handoff.toml"], handoff_bin, f"ConfigMap {config_volume}")


def network_policy(policy: dict) -> None:
    """handoff's policy opens nothing to everyone: each ingress rule to one of its ports names
    its peers, and its egress (when it restricts egress) is port-bound or address-bound."""
    name = f"NetworkPolicy/{policy['metadata']['name']}"
    spec = policy["spec"]
    ports_of = lambda rule: {p.get("port") for p in rule.get("ports", [])}  # noqa: E731
    for rule in spec.get("ingress", []):
        if ports_of(rule) & {"handoff-metrics", "handoff-admin"}:
            check(bool(rule.get("from")), f"{name}: an ingress rule to handoff's ports without `from` admits every pod")
    if "Egress" in spec.get("policyTypes", []):
        for rule in spec.get("egress", []):
            check(bool(rule.get("ports")) or bool(rule.get("to")), f"{name}: an egress rule open to every port and address")


# ---------------------------------------------------------------------------------------------
def cmd_crds(args: argparse.Namespace) -> None:
    docs = [d for d in load(args.manifest) if d["apiVersion"].startswith("monitoring.coreos.com/")]
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "crds.json").write_text(json.dumps(docs))
    ops = yaml.safe_load(Path(args.rules).read_text())
    for i, d in enumerate(x for x in docs if x["kind"] == "PrometheusRule"):
        (out / f"rules-{i}.yaml").write_text(yaml.safe_dump(d["spec"], sort_keys=False))
        check(d["spec"] == ops, f"PrometheusRule/{d['metadata']['name']}: spec differs from {args.rules}")
    print(len(docs))


# ---------------------------------------------------------------------------------------------
def cmd_dashboard(args: argparse.Namespace) -> None:
    dash = json.loads(Path(args.json).read_text())
    check(dash.get("schemaVersion", 0) >= 36, "dashboard: schemaVersion < 36")
    check(bool(dash.get("uid")) and bool(dash.get("title")), "dashboard: uid/title missing")
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    check(variables.get("datasource", {}).get("type") == "datasource", "dashboard: no datasource variable")
    check("relay" in variables and "label_values" in json.dumps(variables["relay"].get("query")),
          "dashboard: relay variable must come from label_values")
    exprs: list[tuple[str, str]] = []
    ids = set()

    def walk(panels: list[dict]) -> None:
        for p in panels:
            check(p.get("id") not in ids, f"dashboard: duplicate panel id {p.get('id')}")
            ids.add(p.get("id"))
            if p.get("type") != "row":
                check(p.get("datasource", {}).get("uid") == "${datasource}",
                      f"dashboard panel {p.get('title')}: datasource must be ${{datasource}}")
                check(bool(p.get("targets")), f"dashboard panel {p.get('title')}: no targets")
            for t in p.get("targets", []):
                exprs.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(dash.get("panels", []))
    for want in ("handoff_relay_published_total", "handoff_relay_pending_rows", "handoff_relay_oldest_pending_age_seconds",
                 "handoff_relay_dead_rows", "handoff_relay_publish_failures_total", "handoff_relay_retries_total",
                 "handoff_relay_dwell_seconds_bucket", "handoff_relay_batch_rows_bucket",
                 "handoff_relay_cycle_seconds_bucket", "handoff_relay_lease_reclaims_total",
                 "handoff_relay_fenced_settles_total", "handoff_relay_source_up", "handoff_relay_stream_up"):
        check(any(want in e for _, e in exprs), f"dashboard: no panel queries {want}")
    # Grafana variables → plain PromQL, so promtool can parse every query.
    subst = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
    rules = []
    for i, (title, expr) in enumerate(exprs):
        for k, v in subst.items():
            expr = expr.replace(k, v)
        expr = re.sub(r"\$\{?(\w+)\}?", ".*", expr)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    Path(args.outfile).write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    print(len(exprs))


def cmd_container_config(args: argparse.Namespace) -> None:
    text = Path(args.toml).read_text()
    config = tomllib.loads(text)
    check(config.get("telemetry", {}).get("listen") == "0.0.0.0:9464", f"{args.toml}: telemetry.listen must be 0.0.0.0:9464")
    check(config.get("telemetry", {}).get("log_format") == "json", f"{args.toml}: telemetry.log_format must be json")
    check("url_file" not in config.get("database", {}), f"{args.toml}: database.url_file breaks HANDOFF_DATABASE__URL")
    if args.handoff_bin:
        loader_check(text, args.handoff_bin, args.toml)


def main() -> int:
    parser = argparse.ArgumentParser(prog="checks.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("render")
    p.add_argument("manifest")
    p.add_argument("--case", required=True)
    p.add_argument("--kinds", required=True)
    p.add_argument("--owner", action="store_true")
    p.add_argument("--native", type=lambda v: v == "true", default=None,
                   help="true / false: the handoff container must be a native / plain sidecar")
    p.add_argument("--handoff-bin")
    p = sub.add_parser("crds")
    p.add_argument("manifest")
    p.add_argument("outdir")
    p.add_argument("--rules", required=True)
    p = sub.add_parser("dashboard")
    p.add_argument("json")
    p.add_argument("outfile")
    p = sub.add_parser("container-config")
    p.add_argument("toml")
    p.add_argument("--handoff-bin")
    args = parser.parse_args()
    {"render": cmd_render, "crds": cmd_crds, "dashboard": cmd_dashboard,
     "container-config": cmd_container_config}[args.command](args)
    for message in problems:
        print(f"FAIL {message}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
