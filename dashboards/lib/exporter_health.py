"""RDMA probes: exporter health (uid rdma-probe-exporter-health): scrapes, config reloads, the
schedule, deferrals, the responder (and the pings it answers) and the process (deploy/README.md,
"Dashboards")."""

from grafana_foundation_sdk.builders import dashboard as db

from grafana import (dashboard, organize, prop, query, query_variable, state_panel, table_panel,
                     timeseries_panel, transform)

UID = "rdma-probe-exporter-health"
N = '{job="$job", instance=~"$node"}'
ND = '{job="$job", instance=~"$node", device=~"$device"}'
NDP = '{job="$job", instance=~"$node", device=~"$device", peer=~"$peer"}'


def variables(d):
    d = d.with_variable(query_variable("node", "Node", 'label_values(up{job="$job"}, instance)'))
    d = d.with_variable(query_variable(
        "device", "Device", 'label_values(rdma_probe_schedule_paths{job="$job", instance=~"$node"}, device)'))
    return d.with_variable(query_variable(
        "peer", "Peer", 'label_values(rdma_probe_success{job="$job", instance=~"$node"}, peer)'))


def exporters(d):
    d = d.with_panel(state_panel("Scraped", "up: Prometheus reached the exporter's /metrics.", 12, 6,
                                 [query("A", f"up{N}", "{{instance}}")], {"0": ("down", "red"), "1": ("up", "green")}))
    d = d.with_panel(state_panel(
        "Config (re)load", "rdma_probe_config_reload_success: 0 while the last (re)load was refused and the previous config keeps running.",
        12, 6, [query("A", f"rdma_probe_config_reload_success{N}", "{{instance}}")],
        {"0": ("refused", "red"), "1": ("loaded", "green")}))
    return d.with_panel(table_panel(
        "Exporters", "Version, uptime and the last good config load of each exporter.", 24, 6,
        [query("A", f"rdma_probe_build_info{N}", instant=True, fmt="table"),
         query("B", f"time() - process_start_time_seconds{N}", instant=True, fmt="table"),
         query("C", f"rdma_probe_config_last_reload_timestamp_seconds{N} * 1000", instant=True, fmt="table")],
        transformations=[transform("merge", {}), organize(
            exclude=["Time", "job", "__name__", "Value #A"],
            rename={"instance": "node", "Value #B": "uptime", "Value #C": "last good config load"})],
        overrides=[("name", "uptime", [prop("unit", "s")]),
                   ("name", "last good config load", [prop("unit", "dateTimeFromNow")])]))


def schedule(d):
    d = d.with_row(db.Row("Schedule and duty cycle"))
    d = d.with_panel(timeseries_panel(
        "Duty cycle used and budget", "Share of the last 10 minutes each device spent bursting, against the budget (schedule.duty_cycle).",
        12, 8, [query("A", f"rdma_probe_schedule_duty_cycle_ratio{ND}", "{{instance}} {{device}} used"),
                query("B", f"max by (instance) (rdma_probe_schedule_duty_cycle_budget_ratio{N})", "{{instance}} budget")],
        unit="percentunit"))
    d = d.with_panel(timeseries_panel(
        "Demand", "Share of time each device's paths want at their configured intervals; above the budget, intervals stretch.",
        12, 8, [query("A", f"rdma_probe_schedule_demand_ratio{ND}", "{{instance}} {{device}}")], unit="percentunit"))
    d = d.with_panel(timeseries_panel(
        "Interval stretch", "1 when the paths fit the budget, else how much longer every interval of the device is (RdmaProbeDutyCycleExhausted).",
        12, 8, [query("A", f"rdma_probe_schedule_interval_stretch_ratio{ND}", "{{instance}} {{device}}")],
        unit="x", threshold=[(None, "transparent"), (1, "orange")]))
    d = d.with_panel(timeseries_panel(
        "Paths per device", "Paths each local device probes.",
        12, 8, [query("A", f"rdma_probe_schedule_paths{ND}", "{{instance}} {{device}}")]))
    d = d.with_panel(timeseries_panel(
        "Deferrals per minute by reason", "busy: the responder served another prober; budget: the device's duty-cycle gate held a probe back (recorded over 4 intervals: instance_device_reason:rdma_probe_deferred:rate).",
        12, 8, [query("A", f"sum by (instance, reason) (instance_device_reason:rdma_probe_deferred:rate{ND}) * 60", "{{instance}} {{reason}}")],
        bars=True, calcs=("sum", "max")))
    return d.with_panel(timeseries_panel(
        "Probes per minute by result", "Bursts run, by result (recorded over 4 intervals: instance_device_result:rdma_probe_runs:rate).",
        12, 8, [query("A", f"sum by (instance, result) (instance_device_result:rdma_probe_runs:rate{ND}) * 60", "{{instance}} {{result}}")],
        bars=True, calcs=("sum", "max")))


def responder(d):
    d = d.with_row(db.Row("Responder"))
    d = d.with_panel(timeseries_panel(
        "Responder sessions per minute by result", "accepted, and refusals: connection_limit, handshake_limit, timeout, closed, limit, auth, protocol, busy.",
        12, 8, [query("A", f"sum by (instance, result) (rate(rdma_probe_responder_sessions_total{ND}[$__rate_interval])) * 60", "{{instance}} {{result}}")],
        bars=True, calcs=("sum", "max")))
    d = d.with_panel(timeseries_panel(
        "Responder: messages verified and validation failures", "Messages whose data the responder checked, and bursts whose data did not verify, by prober (the Peer variable selects probers here).",
        12, 8, [query("A", f"sum by (instance) (rate(rdma_probe_responder_verified_messages_total{ND}[$__rate_interval]))", "{{instance}} verified/s"),
                query("B", f"sum by (instance, peer) (increase(rdma_probe_responder_validation_failures_total{NDP}[$__rate_interval]))", "{{instance}} failures from {{peer}}")]))
    return d.with_panel(timeseries_panel(
        "Pings answered and refused",
        "Pings of other nodes each device's ping engine answered, and packets it refused unanswered "
        "(a key it does not hold, a wrong tag, an answer to no ping of its own: docs/metrics.md, "
        "\"Pings\"), per second; and pinged paths whose ping series the series budget keeps off "
        "/metrics (they are still pinged).",
        24, 8, [query("A", f"sum by (instance, device) (rate(rdma_probe_ping_answered_total{ND}[$__rate_interval]))", "{{instance}} {{device}} answered/s"),
                query("B", f"sum by (instance, device) (rate(rdma_probe_ping_refused_total{ND}[$__rate_interval]))", "{{instance}} {{device}} refused/s"),
                query("C", f"rdma_probe_ping_shed_paths{N}", "{{instance}} paths shed")]))


def process(d):
    d = d.with_row(db.Row("Process"))
    d = d.with_panel(timeseries_panel(
        "CPU", "CPU time of the exporter process, in cores (1 = one core busy).",
        8, 8, [query("A", f"rate(process_cpu_seconds_total{N}[$__rate_interval])", "{{instance}}")], unit="percentunit"))
    d = d.with_panel(timeseries_panel(
        "Memory", "Resident memory (pinned probe and responder regions included) and virtual memory.",
        8, 8, [query("A", f"process_resident_memory_bytes{N}", "{{instance}} resident"),
               query("B", f"process_virtual_memory_bytes{N}", "{{instance}} virtual")], unit="bytes"))
    d = d.with_panel(timeseries_panel(
        "Threads and file descriptors", "OS threads (async workers, one burst thread per local device, blocking pool) and open fds against the limit.",
        8, 8, [query("A", f"process_threads{N}", "{{instance}} threads"),
               query("B", f"process_open_fds{N}", "{{instance}} open fds"),
               query("C", f"process_max_fds{N}", "{{instance}} fd limit")]))
    d = d.with_panel(timeseries_panel(
        "Scrape duration", "How long Prometheus takes to scrape each exporter (scrape_duration_seconds).",
        12, 8, [query("A", f"scrape_duration_seconds{N}", "{{instance}}")], unit="s"))
    return d.with_panel(timeseries_panel(
        "Series per scrape", "Samples each scrape returns (scrape_samples_scraped): grows with paths, reasons and results.",
        12, 8, [query("A", f"scrape_samples_scraped{N}", "{{instance}}")]))


def build():
    d = dashboard(UID, "RDMA probes: exporter health",
                  "rdma-probe-exporter itself: scrapes, config reloads, the schedule's duty cycle, stretch "
                  "and demand, deferrals, the responder, and the process.", "now-24h")
    for part in (variables, exporters, schedule, responder, process):
        d = part(d)
    return d
