"""The dashboards' queries at fleet size, the half of `scripts/fleet-bench --dashboards` that needs
no Prometheus (docs/scale.md, "Fleet bench"): which variable values each dashboard is opened
with, the step and the built-in variables a Grafana panel would query with, and the per-panel
report (returned data, latency) with the p99 as the panels run their queries and over both
modes. Standard library only; scripts/lib/test_dashboard_bench.py tests it.

Every panel query runs as Grafana runs it (an instant query for a table of "now", a range query
for a graph) and, for the latency figures, in the other mode as well: an instant query at the
bench's moment and a range query over the last WINDOW_SECONDS at the panel's step, REPEATS times.

The latency figures are over the runs that returned data: a query whose selectors match nothing
answers in milliseconds, and counting it would make the p99 say less than it seems. The empty
ones are reported apart; one whose every series selector matches series (the bench checks each
with presence_query) and that still returns nothing is a selector or join that went wrong, a
missed target.
"""

import math
import re

WINDOW_SECONDS = 1800  # the range queries' window: the last 30 minutes
REPEATS = 3
TARGET_P99_SECONDS = 1.0
# Grafana's default maxDataPoints is the panel's width in pixels: a 24-column grid on a screen
# about 1920 pixels wide.
PIXELS_PER_COLUMN = 80
# A query of the ping series (docs/metrics.md, "Pings") or of the rules' records of them.
PING_QUERY = re.compile(r"rdma_probe_ping_")
NO_PINGS = "no pings in the emulated fleet"
# PromQL words that are no metric name: keywords, operators, modifiers, and the aggregations
# (which `by (...)` may part from their parenthesis).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan", "sum", "min", "max", "avg", "group", "stddev", "stdvar",
            "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}


def step_seconds(width, scrape_interval, window=WINDOW_SECONDS):
    """A panel's range-query step: the window over its data points (its width in pixels), never
    below the scrape interval (the data source's minimum interval), as Grafana computes it."""
    points = max(int(width), 1) * PIXELS_PER_COLUMN
    return max(float(scrape_interval), math.ceil(window / points))


def builtins(step, scrape_interval, window=WINDOW_SECONDS):
    """Grafana's built-in variables for a panel queried at `step`: $__rate_interval is the larger
    of four scrape intervals and the step plus one (Grafana's definition)."""
    rate = max(4 * scrape_interval, step + scrape_interval)
    return {"__interval": f"{step:g}s", "__rate_interval": f"{rate:g}s", "__range": f"{window}s"}


def settings(job, worst):
    """The variable values each dashboard is benched with, as an operator opens it: the fleet
    overview and the exporter health with their defaults (every node: "All"), the path drilldown
    on what it opens with (the worst node, and the worst ToR pair). `worst` holds the fleet's
    values: node, tor, peer_tor, and tor_nodes and peer_tor_nodes (the nodes of those ToRs as
    Grafana writes "All" of a list: `(a|b)`); missing ones stay at the default, `.*`."""
    base = [f"job={job}"]
    keys = ("node", "tor", "peer_tor", "tor_nodes", "peer_tor_nodes")
    drill = base + [f"{k}={worst[k]}" for k in keys if worst.get(k)]
    return {"fleet-overview.json": base, "exporter-health.json": base, "path-drilldown.json": drill}


def _closing(expr, i, close):
    """The index just past the bracket `close` that matches the one at i, strings skipped."""
    opening, depth = expr[i], 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            i = _string_end(expr, i)
            continue
        depth += (c == opening) - (c == close)
        i += 1
        if depth == 0:
            break
    return i


def _string_end(expr, i):
    quote, i = expr[i], i + 1
    while i < len(expr) and expr[i] != quote:
        i += 2 if expr[i] == "\\" and quote != "`" else 1
    return i + 1


def selectors(expr):
    """The series selectors a PromQL expression reads, as written (`name{matchers}`, with a
    range `[5m]` when it has one), in order, each once. A small scanner, enough for the
    dashboards' queries: strings, grouping clauses and function names are not selectors."""
    out, i, n = [], 0, len(expr)
    while i < n:
        c = expr[i]
        if c in "\"'`":
            i = _string_end(expr, i)
        elif c.isdigit() or (c == "." and i + 1 < n and expr[i + 1].isdigit()):
            while i < n and (expr[i].isalnum() or expr[i] in "._"):
                i += 1  # a number or a duration (5m, 1e3)
        elif c.isalpha() or c in "_:" or c == "{":
            j = i
            while j < n and (expr[j].isalnum() or expr[j] in "_:"):
                j += 1
            name, k = expr[i:j], j
            while k < n and expr[k].isspace():
                k += 1
            if name in GROUPING and k < n and expr[k] == "(":
                i = _closing(expr, k, ")")
                continue
            if name in KEYWORDS or (name and k < n and expr[k] == "("):
                i = j  # a keyword, or a function or aggregation's name
                continue
            end = _closing(expr, k, "}") if k < n and expr[k] == "{" else j
            sel = expr[i:j] + expr[k:end] if end > j else name
            k = end
            while k < n and expr[k].isspace():
                k += 1
            if k < n and expr[k] == "[":
                end = _closing(expr, k, "]")
                sel += expr[k:end]
            if sel not in out:
                out.append(sel)
            i = end
        else:
            i += 1
    return out


def presence_query(selector):
    """A query that returns something when the selector matches series at the moment (for a
    range selector: one with two samples in its range, what rate() and increase() need)."""
    if selector.endswith("]"):
        return f"count(count_over_time({selector}) >= 2)"
    return f"count({selector})"


def percentile(values, q):
    """The q-th percentile (0-100) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(math.ceil(q / 100 * len(ordered)), 1)
    return ordered[rank - 1]


def summarize(runs, pings=True):
    """Per panel and overall, from the runs of its queries: each run a dict with dashboard,
    panel, where, expr, instant (how the panel runs it), and instant_seconds / range_seconds
    (lists of latencies), instant_series / range_series (series returned), error (or None), and
    for a query empty in its own mode missing_series: the selectors of it that matched nothing
    (None when not checked).

    A panel returned data when every one of its queries returned a series in the mode the panel
    runs it. With `pings` False (the fleet has no ping series: the emulator does not ping), a
    query of the ping series that returned none is not a panel without data but one with no
    pings to show (NO_PINGS). Latencies come twice: as Grafana runs the panel (its own mode: what
    an operator waits for; the target), and over both modes (a table's query as a range query
    too); in both only the runs that returned data (or failed: a timeout is a latency too), the
    empty ones counted apart."""
    panels = {}
    own, every, empty, total = [], [], [], 0
    for r in runs:
        key = (r["dashboard"], r["panel"])
        p = panels.setdefault(key, {"dashboard": r["dashboard"], "panel": r["panel"], "queries": 0,
                                    "data": True, "no_data": [], "no_pings": [], "errors": [],
                                    "empty_with_series": [], "max_seconds": 0.0, "max_seconds_any_mode": 0.0})
        p["queries"] += 1
        counted = lambda mode: r.get("error") or r.get(f"{mode}_series")
        own_mode = "instant" if r["instant"] else "range"
        mine = list(r.get(f"{own_mode}_seconds", []))
        times = [t for mode in ("instant", "range") if counted(mode) for t in r.get(f"{mode}_seconds", [])]
        (own if counted(own_mode) else empty).extend(mine)
        every += times
        total += len(r.get("instant_seconds", [])) + len(r.get("range_seconds", []))
        p["max_seconds"] = max([p["max_seconds"]] + (mine if counted(own_mode) else []))
        p["max_seconds_any_mode"] = max([p["max_seconds_any_mode"]] + times)
        if r.get("error"):
            p["errors"].append(f"{r['where']}: {r['error']}")
            p["data"] = False
            continue
        series = r.get(f"{own_mode}_series")
        missing = r.get("missing_series")
        if not series and not pings and PING_QUERY.search(r.get("expr", "")):
            p["no_pings"].append(r["where"])
        elif not series:
            p["data"] = False
            p["no_data"].append(r["where"] + (f" (no series {', '.join(missing)})" if missing else ""))
            if missing == []:
                p["empty_with_series"].append(r["where"])
    p99 = percentile(own, 99)
    listed = list(panels.values())
    return {
        "panels": listed,
        "queries": len(runs),
        "runs": total,
        "empty_runs": len(empty),
        "p99_seconds_empty": percentile(empty, 99),
        "p50_seconds": percentile(own, 50),
        "p99_seconds": p99,
        "max_seconds": max(own) if own else None,
        "p99_seconds_any_mode": percentile(every, 99),
        "max_seconds_any_mode": max(every) if every else None,
        "panels_without_data": [f"{p['dashboard']}: {p['panel']}" for p in listed if not p["data"]],
        "panels_without_pings": [f"{p['dashboard']}: {p['panel']}" for p in listed
                                 if p["data"] and p["no_pings"]],
        "target_p99_seconds": TARGET_P99_SECONDS,
        "empty_with_series": [w for p in listed for w in p["empty_with_series"]],
        "met": (p99 is not None and p99 < TARGET_P99_SECONDS
                and not any(p["errors"] or p["empty_with_series"] for p in listed)),
    }


def problems(summary):
    """The targets missed, as the bench's verdict lists them."""
    out = [e for p in summary["panels"] for e in p["errors"]]
    out += [f"{w}: no data, though every series it reads exists" for w in summary["empty_with_series"]]
    if not summary["queries"]:
        out.append("dashboards: no query ran")
    elif summary["p99_seconds"] is None:
        out.append("dashboards: no query returned data: the latency target judges nothing")
    elif summary["p99_seconds"] >= TARGET_P99_SECONDS:
        out.append(f"dashboards: query latency p99 {summary['p99_seconds']:.2f} s as the panels run them, "
                   f"target < {TARGET_P99_SECONDS:g} s")
    return out


def render(summary):
    ms = lambda s: "-" if s is None else f"{s * 1000:.0f}"
    def data(p):
        return "NO" if not p["data"] else (NO_PINGS if p["no_pings"] else "yes")
    rows = [[p["dashboard"].removesuffix(".json"), p["panel"], p["queries"], data(p),
             ms(p["max_seconds"]), ms(p["max_seconds_any_mode"])] for p in summary["panels"]]
    header = ["dashboard", "panel", "queries", "data", "slowest ms", "both modes ms"]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]
    out.append(f"dashboard queries: {summary['queries']} panel queries, {summary['runs']} runs "
               f"(instant and {WINDOW_SECONDS // 60} min range, {REPEATS} times each); as the panels run "
               f"them: p50 {ms(summary['p50_seconds'])} ms, p99 {ms(summary['p99_seconds'])} ms (target < "
               f"{TARGET_P99_SECONDS * 1000:.0f} ms), slowest {ms(summary['max_seconds'])} ms; both modes: "
               f"p99 {ms(summary['p99_seconds_any_mode'])} ms, slowest {ms(summary['max_seconds_any_mode'])} ms; "
               f"over the runs that returned data")
    out.append(f"runs left out, as the panels run them, for returning no series: {summary['empty_runs']} "
               f"(p99 {ms(summary['p99_seconds_empty'])} ms)")
    out.append(f"panels without data: {len(summary['panels_without_data'])}; queries without data though "
               f"every series they read exists: {len(summary['empty_with_series'])} (target 0)")
    if summary.get("panels_without_pings"):
        out.append(f"panels of pings without data, {NO_PINGS}: {len(summary['panels_without_pings'])}")
    for p in summary["panels"]:
        for w in p["no_data"]:
            out.append(f"  no data: {w}")
        for w in p["empty_with_series"]:
            out.append(f"  FAIL no data, though every series it reads exists: {w}")
        for w in p.get("no_pings", []):
            out.append(f"  {NO_PINGS}: {w}")
        for e in p["errors"]:
            out.append(f"  error: {e}")
    return "\n".join(out)
