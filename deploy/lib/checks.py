#!/usr/bin/env python3
"""Checks of deploy/check that need more than promtool (standard library only).

  checks.py rules RULES_FILE TEST_FILE...
      every alert has a severity (critical, warning, info), a component, a summary, a
      description, an absolute runbook_url whose anchor is a heading of docs/runbook.md named
      after the alert, and an absolute dashboard_url; every alert has unit tests that expect it
      to fire, to stay quiet, and to resolve (a test that expects it to fire and, later on the
      same series, quiet again): alert_rule_test items, or the exact-set checks of the fleet
      tests (deploy/prometheus/tests/fleet.py: at each such check, an alert is expected to fire
      or to be quiet); every metric a rule reads (in its expression or its annotations' queries)
      is in the metric contract (docs/metrics.md, docs/schedule.md) or is a recording rule.
  checks.py dashboards OUT_RULES_FILE DASHBOARD...
      each dashboard is valid JSON with the required fields, native panels only, the datasource,
      node, peer and device variables, and data links to existing dashboards; writes every PromQL
      expression (panel targets, and the selector inside each label_values() variable query),
      Grafana variables replaced by placeholders, as one recording rule per group named after its
      dashboard and panel, for `promtool check rules`.
  checks.py queries OUT_JSON [NAME=VALUE...] DASHBOARD...
      writes every panel's PromQL expression with the dashboard variables set (NAME=VALUE, e.g.
      node=node1 __rate_interval=1m; a query variable not set matches all its values, `.*`:
      Grafana's "All", or every value of one that opens on its worst value) as a JSON list of
      {"where", "expr", "dashboard", "panel", "width", "instant"}: the lab and scripts/fleet-bench
      --dashboards run them against a real Prometheus.

Rules files are read line by line (the generated file's own layout: `- alert:` items with
`labels:` and `annotations:` below); test files by their alert_rule_test items (an item starts
at a `- eval_time:`, `- alertname:` or `- exp_alerts:` line).
"""

import json
import re
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEVERITIES = {"critical", "warning", "info"}
COMPONENTS = {"node", "port", "tor_uplink", "path", "exporter", "prometheus"}
# The fleet tests' exact-set checks (deploy/prometheus/tests/fleet.py): the query, its eval_time and
# the expected samples.
FLEET_EXACT = re.compile(
    r"- expr: 'count by \(alertname,[^']*\(ALERTS\{alertstate=\"firing\"(?:,alertname!~\"([^\"]*)\")?\}\)'\n"
    r"\s+eval_time: (\S+)\n\s+exp_samples:(.*?)(?=\n\s+(?:- expr|#)|\Z)", re.S)
# Series Prometheus itself makes, which the contract does not list.
PROMETHEUS_SERIES = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds",
                     "scrape_samples_scraped", "scrape_series_added"}
NATIVE_PANELS = {"row", "timeseries", "stat", "table", "heatmap", "state-timeline", "status-history"}
REQUIRED_VARIABLES = ("node", "peer", "device")
METRIC = re.compile(r"(?<![\w:\"'.$])((?:rdma_probe|process)_[a-zA-Z0-9_]*|up|ALERTS|scrape_[a-z_]+)(?![\w:(\"'])")

errors = []


def fail(msg):
    errors.append(msg)


def contract_metrics():
    names = set(PROMETHEUS_SERIES)
    for doc in ("docs/metrics.md", "docs/schedule.md"):
        names |= set(re.findall(r"\b((?:rdma_probe|process)_[a-z0-9_]+)", (ROOT / doc).read_text()))
    return names


def check_metric_names(expr, known, where):
    for name in METRIC.findall(expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in known and base not in known:
            fail(f"{where}: metric {name} is not in the contract (docs/metrics.md, docs/schedule.md)")


def github_anchors(markdown):
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


# ---------------------------------------------------------------- rules

def parse_rules(text):
    """[(kind, name, body)] for every `- alert:` / `- record:` item of a rules file."""
    items = []
    for m in re.finditer(r"^\s*- (alert|record): (\S+)\n(.*?)(?=^\s*- (?:alert|record|name): |\Z)",
                         text, re.M | re.S):
        items.append((m.group(1), m.group(2), m.group(3)))
    return items



def duration_seconds(text):
    """A Prometheus duration (`90m`, `1h30m`, `45s`) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        fail(f"eval_time {text!r} is not a duration")
        return 0
    return sum(int(n) * units[u] for n, u in parts)


def fleet_cases(text, alert_names, seen):
    """The fleet tests' exact sets: at each, every alert is expected to fire or to be quiet, but
    those it leaves out (alertname!~, raised or cleared by a fault just then)."""
    times = {}
    for m in FLEET_EXACT.finditer(text):
        unsettled = set((m.group(1) or "").split("|"))
        at = duration_seconds(m.group(2))
        firing = set(re.findall(r'alertname="([^"]+)"', m.group(3)))
        for name in (n for n in alert_names if n not in unsettled):
            kind = "firing" if name in firing else "quiet"
            seen.setdefault(name, set()).add(kind)
            times.setdefault(name, []).append((at, kind))
    return times


def test_cases(paths, alert_names=()):
    """{alertname: {"firing", "quiet", "resolves"}} over every alert_rule_test item and fleet
    exact-set check of the test files: "resolves" when one test (one input) expects the alert to
    fire and, at a later eval_time, nothing."""
    seen = {}
    for p in paths:
        text = Path(p).read_text()
        for name, evals in fleet_cases(text, alert_names, seen).items():
            fired = [t for t, kind in evals if kind == "firing"]
            if fired and any(t > min(fired) for t, kind in evals if kind == "quiet"):
                seen[name].add("resolves")
        tests = [m.start() for m in re.finditer(r"^  - (?:name|interval):", text, re.M)] + [len(text)]
        for begin, end in zip(tests, tests[1:]):
            test = text[begin:end]
            times = {}
            starts = [m.start() for m in re.finditer(r"^\s+- (?:eval_time|alertname|exp_alerts):", test, re.M)]
            for i, s in enumerate(starts):
                item = test[s:starts[i + 1] if i + 1 < len(starts) else len(test)]
                name = re.search(r"alertname: (\S+)", item)
                exp = re.search(r"exp_alerts:(.*)", item)
                at = re.search(r"eval_time: (\S+)", item)
                if not name or not exp or not at:
                    continue
                kind = "quiet" if exp.group(1).strip() == "[]" else "firing"
                seen.setdefault(name.group(1), set()).add(kind)
                times.setdefault(name.group(1), []).append((duration_seconds(at.group(1)), kind))
            for name, evals in times.items():
                fired = [t for t, kind in evals if kind == "firing"]
                if fired and any(t > min(fired) for t, kind in evals if kind == "quiet"):
                    seen[name].add("resolves")
    return seen


def check_rules(rules_file, tests):
    text = Path(rules_file).read_text()
    items = parse_rules(text)
    known = contract_metrics() | {n for k, n, _ in items if k == "record"}
    anchors = github_anchors((ROOT / "docs/runbook.md").read_text())
    alerts = [(n, b) for k, n, b in items if k == "alert"]
    cases = test_cases(tests, [n for n, _ in alerts])
    if not alerts:
        fail(f"{rules_file}: no alerts found")
    for kind, name, body in items:
        # The expression and the annotations' queries.
        check_metric_names(body, known, f"{rules_file}: {kind} {name}")
    for name, body in alerts:
        where = f"{rules_file}: alert {name}"
        sev = re.search(r"^\s*severity: (\S+)", body, re.M)
        if not sev or sev.group(1) not in SEVERITIES:
            fail(f"{where}: severity must be one of {', '.join(sorted(SEVERITIES))}")
        comp = re.search(r"^\s*component: (\S+)", body, re.M)
        if not comp or comp.group(1) not in COMPONENTS:
            fail(f"{where}: component must be one of {', '.join(sorted(COMPONENTS))}")
        dash = re.search(r"^\s*dashboard_url: \"?(\S+)", body, re.M)
        if not dash or not re.match(r"https?://", dash.group(1)):
            fail(f"{where}: no absolute dashboard_url annotation")
        for key in ("summary", "description"):
            if not re.search(rf"^\s*{key}: \S", body, re.M):
                fail(f"{where}: no {key} annotation")
        url = re.search(r"^\s*runbook_url: \"?([^\"\s]+)", body, re.M)
        if not url:
            fail(f"{where}: no runbook_url annotation")
        elif not re.match(r"https?://", url.group(1)):
            fail(f"{where}: runbook_url {url.group(1)} is not an absolute URL")
        else:
            anchor = url.group(1).partition("#")[2]
            if anchor != name.lower():
                fail(f"{where}: runbook_url should end in #{name.lower()}, not #{anchor}")
            elif anchor not in anchors:
                fail(f"{where}: docs/runbook.md has no heading for #{anchor}")
        got = cases.get(name, set())
        expects = {
            "firing": "to fire",
            "quiet": "to stay quiet (exp_alerts: [])",
            "resolves": "to resolve (to fire, then exp_alerts: [] at a later eval_time of the same test)",
        }
        for kind, what in expects.items():
            if kind not in got:
                fail(f"{where}: no unit test expects it {what}")
    for name in cases:
        if name not in dict(alerts):
            fail(f"unit tests name an alert the rules do not have: {name}")
    print(f"deploy/check: {len(alerts)} alerts, {sum(1 for k, _, _ in items if k == 'record')} recording rules: "
          f"annotations, runbook anchors, unit tests firing, quiet and resolving, contract metric names")


# ---------------------------------------------------------------- dashboards

DURATION_BUILTINS = {"__rate_interval", "__interval", "__range", "__auto_interval"}
NUMBER_BUILTINS = {"__range_s", "__range_ms", "__interval_ms"}


def substitute(expr, variables, where):
    """Grafana variables replaced by values that parse: durations, numbers, label values."""
    def value(name):
        if name in variables:
            return variables[name]
        if name in DURATION_BUILTINS:
            return "5m"
        if name in NUMBER_BUILTINS:
            return "300"
        fail(f"{where}: unknown variable ${name}")
        return "placeholder"
    expr = re.sub(r"\$\{(\w+)(?::[\w]+)?\}", lambda m: value(m.group(1)), expr)
    expr = re.sub(r"\[\[(\w+)(?::[\w]+)?\]\]", lambda m: value(m.group(1)), expr)
    return re.sub(r"\$(\w+)", lambda m: value(m.group(1)), expr)


def variable_value(v):
    if v.get("type") in ("constant", "custom", "textbox"):
        q = v.get("query", "")
        return str(q).split(",")[0].strip() or "placeholder"
    return "placeholder"


def variable_promql(q):
    """The PromQL inside a Prometheus variable query, or None when it has none."""
    if isinstance(q, dict):
        q = q.get("query", "")
    q = (q or "").strip()
    m = re.fullmatch(r"label_values\((.*),\s*\w+\s*\)", q, re.S)
    if m:
        return m.group(1)
    if re.fullmatch(r"label_values\(\s*\w+\s*\)|label_names\(.*\)|metrics\(.*\)", q, re.S):
        return None
    m = re.fullmatch(r"query_result\((.*)\)", q, re.S)
    return m.group(1) if m else (q or None)


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def check_dashboards(out_rules, paths):
    known = contract_metrics()
    rules_text = (ROOT / "deploy/prometheus/rules.yaml").read_text()
    known |= set(re.findall(r"^\s*- record: (\S+)", rules_text, re.M))
    loader = SourceFileLoader("generate", str(ROOT / "deploy/prometheus/generate"))
    generator = module_from_spec(spec_from_loader("generate", loader))
    loader.exec_module(generator)
    boards, groups, uids = [], [], {}
    for path in paths:
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            fail(f"{path}: not valid JSON: {e}")
            continue
        boards.append((path, d))
        for key in ("title", "uid", "panels", "templating", "schemaVersion"):
            if key not in d:
                fail(f"{path}: no top-level {key!r}")
        if not isinstance(d.get("schemaVersion"), int) or d.get("schemaVersion", 0) < 39:
            fail(f"{path}: schemaVersion must be 39 or later")
        uid = d.get("uid", "")
        if not re.fullmatch(r"[\w-]{1,40}", str(uid)):
            fail(f"{path}: uid must be 1-40 letters, digits, - or _")
        if uid in uids:
            fail(f"{path}: uid {uid} is also {uids[uid]}'s")
        uids[uid] = path
    for path, d in boards:
        tvars = d.get("templating", {}).get("list", [])
        names = {v.get("name"): v for v in tvars}
        ds = names.get("datasource")
        if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
            fail(f"{path}: no Prometheus datasource variable named 'datasource'")
        for name in REQUIRED_VARIABLES:
            if name not in names:
                fail(f"{path}: no template variable {name!r}")
        values = {n: variable_value(v) for n, v in names.items()}
        if "degraded_ratio" in names:
            want = str(generator.THRESHOLDS["degraded_ratio"])
            if values["degraded_ratio"] != want:
                fail(f"{path}: constant degraded_ratio is {values['degraded_ratio']}, the rules' "
                     f"(deploy/prometheus/generate) {want}")
        for v in tvars:
            if v.get("type") != "query":
                continue
            where = f"{path}: variable {v.get('name')}"
            if v.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"{where}: datasource must be ${{datasource}}")
            query = v.get("query")
            shown = query.get("query") if isinstance(query, dict) else query
            if v.get("definition", shown) != shown:
                fail(f"{where}: definition (what the editor shows) differs from the query Grafana runs")
            promql = variable_promql(query)
            if promql:
                check_metric_names(promql, known, where)
                groups.append((where, substitute(promql, values, where)))
        ids = set()
        for p in all_panels(d.get("panels", [])):
            where = f"{path}: panel {p.get('id')} {p.get('title', '?')!r}"
            if p.get("type") not in NATIVE_PANELS:
                fail(f"{where}: type {p.get('type')!r} is not one of {', '.join(sorted(NATIVE_PANELS))}")
            if p.get("id") in ids:
                fail(f"{where}: id {p.get('id')} used twice")
            ids.add(p.get("id"))
            if "gridPos" not in p:
                fail(f"{where}: no gridPos")
            if p.get("type") == "row":
                continue
            if p.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"{where}: datasource must be ${{datasource}}")
            links = [l.get("url", "") for l in p.get("fieldConfig", {}).get("defaults", {}).get("links", [])]
            for url in links:
                m = re.match(r"/d/([\w-]+)", url)
                if m and m.group(1) not in uids:
                    fail(f"{where}: data link to unknown dashboard uid {m.group(1)}")
            targets = p.get("targets", [])
            if not targets:
                fail(f"{where}: no targets")
            for t in targets:
                tw = f"{where} (query {t.get('refId', '?')})"
                if not t.get("expr"):
                    fail(f"{tw}: no expr")
                    continue
                check_metric_names(t["expr"], known, tw)
                groups.append((tw, substitute(t["expr"], values, tw)))
    rules = {"groups": [{"name": where, "rules": [{"record": f"dashboard_expr_{i}", "expr": expr}]}
                        for i, (where, expr) in enumerate(groups)]}
    # JSON is YAML: promtool reads it as a rules file.
    Path(out_rules).write_text(json.dumps(rules, indent=1) + "\n")
    print(f"deploy/check: {len(boards)} dashboards, {len(groups)} PromQL expressions written for promtool")


def dashboard_queries(out_json, settings, paths):
    """Every PromQL expression of the dashboards with the variables set as a user would set them,
    for running against a real Prometheus (the lab's). `settings` are NAME=VALUE pairs (Grafana's
    built-ins such as __rate_interval included); a variable not set keeps its default: a
    constant's value, else `.*` for a query variable (Grafana's "All"; a variable without one,
    which opens on its first value, matches all of them), else an error."""
    given = dict(s.split("=", 1) for s in settings)
    queries = []
    for path in paths:
        d = json.loads(Path(path).read_text())
        values = {}
        for v in d.get("templating", {}).get("list", []):
            name = v.get("name")
            if name in given:
                values[name] = given[name]
            elif v.get("type") in ("constant", "custom", "textbox"):
                values[name] = variable_value(v)
            elif v.get("includeAll") or v.get("type") == "query":
                values[name] = ".*"
        values.update({k: v for k, v in given.items() if k.startswith("__")})
        for p in all_panels(d.get("panels", [])):
            for t in p.get("targets", []):
                if t.get("expr"):
                    where = f"{Path(path).name}: panel {p.get('id')} {p.get('title', '?')!r} (query {t.get('refId', '?')})"
                    queries.append({"where": where, "expr": substitute(t["expr"], values, where),
                                    "dashboard": Path(path).name, "panel": f"{p.get('id')} {p.get('title', '?')}",
                                    "width": p.get("gridPos", {}).get("w", 24), "instant": bool(t.get("instant"))})
    Path(out_json).write_text(json.dumps(queries, indent=1) + "\n")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("rules", "dashboards", "queries"):
        sys.exit(__doc__)
    if sys.argv[1] == "rules":
        check_rules(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "dashboards":
        check_dashboards(sys.argv[2], sys.argv[3:])
    else:
        settings = [a for a in sys.argv[3:] if "=" in a and not a.endswith(".json")]
        boards = [a for a in sys.argv[3:] if a not in settings]
        dashboard_queries(sys.argv[2], settings, boards)
    for e in errors:
        print(f"FAIL: {e}", file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
