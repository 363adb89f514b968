#!/usr/bin/env python3
"""Runs queries against a Prometheus over a time range, as a Grafana panel does, and records how
many series each returned (standard library only; run inside a lab node).

Usage: prometheus_queries.py URL QUERIES_JSON START END STEP_S OUT_JSON

QUERIES_JSON is a list of {"where", "expr"} (deploy/lib/checks.py queries). OUT_JSON gets the
same list with "series" (the number of series with at least one point in [START, END]), "error"
(Prometheus's error, or null) and "events": for each selector of a series the exporter creates
at its first event (the counters of errors, deferrals and validation failures; a path's first
capacity burst: docs/metrics.md) or only on hardware that has it (the PCIe link families, which a
Soft-RoCE device on virtio-net has not), how many series it matched (for a recorded series made
from such series, RECORDED_EVENTS, the source's). A query with no data whose
event selectors all matched nothing is "nothing happened", not a broken query.
"""

import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request


def query_range(url, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    except (OSError, ValueError) as e:
        return None, str(e)
    if body.get("status") != "success":
        return None, body.get("error", "unknown error")
    return len(body["data"]["result"]), None


EVENT_SELECTOR = re.compile(
    r"rdma_probe_(?:errors|deferred|responder_validation_failures)_total\{[^}]*\}"
    r"|rdma_probe_(?:target_)?bandwidth_bytes_per_second\{[^}]*kind=\"capacity\"[^}]*\}"
    r"|rdma_probe_pcie_link_\w+\{[^}]*\}")
# The recorded series of deploy/prometheus/rules.yaml that exist only after such an event, and
# the event's selector.
RECORDED_EVENTS = {
    "path:rdma_probe_capacity_ratio:worst": 'rdma_probe_bandwidth_bytes_per_second{kind="capacity"}',
    "instance_device_reason:rdma_probe_deferred:rate": "rdma_probe_deferred_total",
}


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    url, queries_file, start, end, step, out = sys.argv[1:]
    queries = json.load(open(queries_file))
    for q in queries:
        q["series"], q["error"] = query_range(url, q["expr"], start, end, step)
        selectors = EVENT_SELECTOR.findall(q["expr"])
        selectors += [sel for name, sel in RECORDED_EVENTS.items() if name in q["expr"]]
        q["events"] = {sel: query_range(url, sel, start, end, step)[0] for sel in selectors}
    json.dump(queries, open(out, "w"), indent=1)
    empty = [q for q in queries if not q["series"]]
    print(f"{len(queries)} dashboard queries, {len(empty)} without data")
    for q in empty:
        why = q["error"] or ("no such events" if q["events"] and not any(q["events"].values()) else "empty")
        print(f"  no data: {q['where']}: {why}")


if __name__ == "__main__":
    main()
