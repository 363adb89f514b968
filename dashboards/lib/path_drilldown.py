"""RDMA probes: path drilldown (uid rdma-probe-path): the nodes of one ToR pair on a rail, then
one node's paths (or a few) over time, their pings, its ports and PCIe links (deploy/README.md,
"Dashboards"). Opened without variables it shows the worst ToR pair and the worst node, never
the whole fleet."""

from grafana_foundation_sdk.builders import dashboard as db

from grafana import (RATIO_STEPS, dashboard, heatmap_panel, link, matrix, organize, prop, query,
                     query_variable, sel, state_panel, table_panel, timeseries_panel, transform)

UID = "rdma-probe-path"
S = sel()
CAPACITY = sel('kind="capacity"')
LEGEND = "{{instance}} {{device}} → {{peer}} {{peer_device}}"
PAIR = 'tor=~"$tor", peer_tor=~"$peer_tor", rail=~"$rail"'
NODE_LINK = ("/d/rdma-probe-path/rdma-probe-path-drilldown?${__url_time_range}&var-datasource=${datasource}"
             "&var-job=${job}&var-tor=${tor}&var-peer_tor=${peer_tor}&var-rail=${rail}"
             "&var-node=${__data.fields[0]}&var-peer=${__field.name}")


def variables(d):
    # Worst first, not "All": a fleet of 250 nodes must not be plotted at once.
    d = d.with_variable(query_variable(
        "node", "Node", 'query_result(sort(instance:rdma_probe_success:ratio{job="$job"}))',
        include_all=False, regex='/instance="([^"]+)"/', ordered=False))
    d = d.with_variable(query_variable(
        "device", "Device", 'label_values(rdma_probe_success{job="$job", instance=~"$node"}, device)'))
    d = d.with_variable(query_variable(
        "peer", "Peer", 'label_values(rdma_probe_success{job="$job", instance=~"$node", device=~"$device"}, peer)'))
    d = d.with_variable(query_variable(
        "tor", "ToR", 'query_result(sort(min by (tor) (tor_pair_rail:rdma_probe_success:ratio{job="$job"})))',
        multi=False, include_all=False, regex='/tor="([^"]+)"/', ordered=False))
    d = d.with_variable(query_variable(
        "peer_tor", "Peer ToR",
        'query_result(sort(min by (peer_tor) (tor_pair_rail:rdma_probe_success:ratio{job="$job", tor=~"$tor"})))',
        multi=False, include_all=False, regex='/peer_tor="([^"]+)"/', ordered=False))
    d = d.with_variable(query_variable(
        "rail", "Rail", 'label_values(tor_pair_rail:rdma_probe_success:ratio{job="$job"}, rail)'))
    # The probing nodes of ToR $tor and the peers in $peer_tor, every one listed (not `.*`): the
    # node x peer table selects their paths by the index instead of reading every path.
    d = d.with_variable(query_variable(
        "tor_nodes", "Nodes of the ToR", 'label_values(path:rdma_probe_labels:info{job="$job", tor=~"$tor"}, instance)',
        all_value=None, hidden=True))
    return d.with_variable(query_variable(
        "peer_tor_nodes", "Peers of the peer ToR",
        'label_values(path:rdma_probe_labels:info{job="$job", peer_tor=~"$peer_tor"}, peer)',
        all_value=None, hidden=True))


def tor_pair(d):
    d = d.with_row(db.Row("Node × node: ToR $tor → $peer_tor, rail $rail"))
    ends = (f'path:rdma_probe_labels:info{{job="$job", {PAIR}}}')
    pair = '{job="$job", instance=~"$tor_nodes", peer=~"$peer_tor_nodes"}'
    expr = (f"min by (instance, peer) ((path:rdma_probe_bandwidth:ratio{pair}"
            f" or path:rdma_probe_consecutive_failures:failed{pair} * 0)"
            f" and on(job, instance, device, peer, peer_device) {ends})")
    return d.with_panel(table_panel(
        "Achieved / target, node × peer, ToR $tor → $peer_tor",
        "The paths between the two ToRs on the selected rails (from the fleet overview's ToR × ToR "
        "cells). Rows: probing node (`instance`); columns: peer. Each cell is the worst path between "
        "the two: its last successful paced burst against its pace, 0 when its last probe failed. "
        "Click a cell for the node's paths to that peer below.",
        24, 10, [query("A", expr, instant=True, fmt="table")],
        transformations=[matrix("instance", "peer")], cells="color-background", unit="percentunit",
        decimals=0, steps=RATIO_STEPS, links=[link("This node and peer", NODE_LINK)]))


def paths(d):
    d = d.with_row(db.Row("Paths of $node"))
    d = d.with_panel(timeseries_panel(
        "Bandwidth: achieved, target, slowest window",
        "Achieved payload bandwidth of each path's last burst of each kind, what it aimed for, and its slowest short window (10 ms, longer at low rates): `paced` bursts aim for the pace, `capacity` bursts (unpaced, every `unpaced_every`-th) for the lower link rate of both ends.",
        12, 9, [query("A", f"rdma_probe_bandwidth_bytes_per_second{S}", "{{instance}} {{device}} → {{peer}} {{peer_device}} {{kind}} achieved"),
                query("B", f"rdma_probe_target_bandwidth_bytes_per_second{S}", "{{instance}} {{device}} → {{peer}} {{peer_device}} {{kind}} target"),
                query("C", f"rdma_probe_bandwidth_min_window_bytes_per_second{S}", "{{instance}} {{device}} → {{peer}} {{peer_device}} {{kind}} slowest window")],
        unit="Bps"))
    d = d.with_panel(timeseries_panel(
        "Achieved / target",
        "Paced bursts below the dashed line ($degraded_ratio) for three probes in a row fire RdmaProbePathDegraded (or RdmaProbePortDegraded when the port is slow on all its paths); a capacity burst's ratio is its bandwidth against the lower link rate of both ends.",
        12, 9, [query("A", f"rdma_probe_bandwidth_bytes_per_second{S} / (rdma_probe_target_bandwidth_bytes_per_second{S} > 0)", "{{instance}} {{device}} → {{peer}} {{peer_device}} {{kind}}"),
                query("B", f"rdma_probe_bandwidth_min_window_bytes_per_second{S} / (rdma_probe_bandwidth_bytes_per_second{S} > 0)", "{{instance}} {{device}} → {{peer}} {{peer_device}} {{kind}} slowest window / average")],
        unit="percentunit", threshold=[(None, "red"), (0.7, "transparent")]))
    d = d.with_panel(state_panel(
        "Probe result", "1: the last probe succeeded; 0: it failed (errors below).", 24, 5,
        [query("A", f"rdma_probe_success{S}", LEGEND)], {"0": ("failed", "red"), "1": ("ok", "green")}))
    d = d.with_panel(timeseries_panel(
        "Longest completion gap", "Longest pause between completions in each burst; a paced burst's wait for its first completion counts.",
        12, 8, [query("A", f"rdma_probe_completion_gap_max_seconds{S}", LEGEND + " {{kind}}")], unit="s"))
    d = d.with_panel(timeseries_panel(
        "Message rate", "Completed RDMA WRITEs per second in each path's last burst.",
        12, 8, [query("A", f"rdma_probe_message_rate_per_second{S}", LEGEND + " {{kind}}")], unit="wps"))
    d = d.with_panel(timeseries_panel(
        "Failed probes in a row",
        "rdma_probe_consecutive_failures: failed probes of each path since its last success (0 after a success; busy and budget deferrals are not probes). With the planned interval (rdma_probe_path_interval_seconds) it says how long a path has been failing in probes, not in wall time.",
        12, 8, [query("A", f"rdma_probe_consecutive_failures{S}", LEGEND)], calcs=("lastNotNull", "max"), decimals=0))
    d = d.with_panel(timeseries_panel(
        "Errors by reason", 'Failed probes of the selected paths by reason (docs/metrics.md, "Error reasons").',
        12, 8, [query("A", f"sum by (instance, device, peer, reason) (increase(rdma_probe_errors_total{S}[$__rate_interval]))",
                      "{{instance}} {{device}} → {{peer}}: {{reason}}")], bars=True, calcs=("sum",)))
    d = d.with_panel(timeseries_panel(
        "Session setup time", "Control and QP setup time of each path's last session (re)build: a new session, or a rebuild after an error or an idle timeout.",
        12, 8, [query("A", f"rdma_probe_setup_seconds{S}", LEGEND)], unit="s"))
    d = d.with_panel(timeseries_panel(
        "Deferrals by reason", "Probes not run, which are not failures: busy (the responder served another prober) and budget (the device's duty-cycle budget).",
        12, 8, [query("A", f"sum by (instance, device, peer, reason) (increase(rdma_probe_deferred_total{S}[$__rate_interval]))",
                      "{{instance}} {{device}} → {{peer}}: {{reason}}")], bars=True, calcs=("sum",)))
    return d.with_panel(table_panel(
        "Paths", "Each selected path now: time since its last successful probe, and its counters over the dashboard's time range.",
        24, 8, [query("A", f"time() - rdma_probe_last_success_timestamp_seconds{S}", instant=True, fmt="table"),
                query("B", f"sum without (result) (increase(rdma_probe_runs_total{S}[$__range]))", instant=True, fmt="table"),
                query("C", f"sum without (reason) (increase(rdma_probe_errors_total{S}[$__range]))", instant=True, fmt="table"),
                query("D", f"increase(rdma_probe_bytes_total{S}[$__range])", instant=True, fmt="table")],
        transformations=[
            transform("merge", {}),
            organize(exclude=["Time", "job"], index={"instance": 0, "device": 1, "peer": 2, "peer_device": 3},
                     rename={"instance": "node", "Value #A": "since last success", "Value #B": "runs",
                             "Value #C": "errors", "Value #D": "bytes"})],
        overrides=[("name", "since last success", [prop("unit", "s")]), ("name", "bytes", [prop("unit", "bytes")]),
                   ("regexp", "runs|errors", [prop("decimals", 0)])]))


def pings(d):
    """The selected paths' pings: round trip percentiles, the responder's delay, the loss, and the
    devices' round trips of every ping as a heatmap."""
    d = d.with_row(db.Row("Pings of $node"))
    d = d.with_panel(timeseries_panel(
        "Ping round trip",
        "Percentiles (50, 90, 99) of each path's ping round trips over the exporter's ping window "
        "(ping.window, 1 min by default), the responder's delay taken out (docs/metrics.md, "
        "\"Pings\"); none while no ping was answered. RdmaProbePathLatencyHigh compares the median "
        "with the path's own over an hour and with its ToR pair's.",
        8, 8, [query("A", f"rdma_probe_ping_rtt_seconds{S}", LEGEND + " p{{percentile}}")],
        unit="s", calcs=("lastNotNull", "min", "max")))
    d = d.with_panel(timeseries_panel(
        "Ping responder delay",
        "Median time the peer's exporter held each path's pings before answering (its receive to "
        "its answer), over the ping window: what the round trip leaves out. A delay that grows is "
        "the peer's host (CPU), not the network.",
        8, 8, [query("A", f"rdma_probe_ping_responder_delay_seconds{S}", LEGEND)], unit="s"))
    d = d.with_panel(timeseries_panel(
        "Ping loss",
        "Share of each path's pings not answered within ping.timeout: over the rules' loss window "
        "(60 pings: path:rdma_probe_ping_loss:ratio, what the packet-loss alerts read) and over the "
        "panel's interval. From the dashed line (2%) a path is lossy; from half, its loss is a total "
        "fault's (a dead port, node or path), which the burst alerts name.",
        8, 8, [query("A", f"path:rdma_probe_ping_loss:ratio{S}", LEGEND + " (loss window)"),
               query("B", f"increase(rdma_probe_ping_lost_total{S}[$__rate_interval])"
                          f" / (increase(rdma_probe_ping_sent_total{S}[$__rate_interval]) > 0)", LEGEND)],
        unit="percentunit", threshold=[(None, "transparent"), (0.02, "orange")]))
    return d.with_panel(heatmap_panel(
        "Ping round trips of the node's devices",
        "Every ping the selected devices sent and had answered, all their paths together, by "
        "round trip (rdma_probe_ping_device_rtt_seconds: buckets from 5 µs to 100 ms), per panel "
        "interval: a second mode or a tail the paths' percentiles average away.",
        24, 8, [query("A", 'sum by (le) (increase(rdma_probe_ping_device_rtt_seconds_bucket'
                           '{job="$job", instance=~"$node", device=~"$device"}[$__rate_interval]))',
                      "{{le}}", fmt="heatmap")]))


def ports(d):
    d = d.with_row(db.Row("Ports of $node"))
    port = sel(peer=False)
    d = d.with_panel(table_panel(
        "Port facts",
        "Each probed port of the node: state, lanes, link rate, and the rate against the fastest "
        "port of the same device name in the fleet (docs/metrics.md, \"Port facts\"; "
        "RdmaProbePortLinkBelowFleet).",
        12, 7, [query("A", f"rdma_probe_port_up{port}", instant=True, fmt="table"),
                query("B", f"rdma_probe_port_width_lanes{port}", instant=True, fmt="table"),
                query("C", f"rdma_probe_port_rate_bytes_per_second{port}", instant=True, fmt="table"),
                query("D", f"rdma_probe_port_rate_bytes_per_second{port} / on(job, device) group_left() "
                           'max by (job, device) (rdma_probe_port_rate_bytes_per_second{job="$job"})',
                      instant=True, fmt="table")],
        transformations=[
            transform("merge", {}),
            organize(exclude=["Time", "job", "__name__"], index={"instance": 0, "device": 1, "port": 2},
                     rename={"instance": "node", "Value #A": "up", "Value #B": "lanes", "Value #C": "rate",
                             "Value #D": "rate / fleet's fastest"})],
        overrides=[("name", "rate", [prop("unit", "Bps")]),
                   ("name", "rate / fleet's fastest", [prop("unit", "percentunit"), prop("decimals", 0)])]))
    d = d.with_panel(table_panel(
        "PCIe links",
        "Negotiated PCIe width and speed of each device against what its PCI function supports "
        "(RdmaProbePcieLinkDegraded).",
        12, 7, [query("A", f"rdma_probe_pcie_link_width_lanes{port}", instant=True, fmt="table"),
                query("B", f"rdma_probe_pcie_link_max_width_lanes{port}", instant=True, fmt="table"),
                query("C", f"rdma_probe_pcie_link_speed_transfers_per_second{port}", instant=True, fmt="table"),
                query("D", f"rdma_probe_pcie_link_max_speed_transfers_per_second{port}", instant=True, fmt="table")],
        transformations=[
            transform("merge", {}),
            organize(exclude=["Time", "job", "__name__"], index={"instance": 0, "device": 1},
                     rename={"instance": "node", "Value #A": "lanes", "Value #B": "maximum lanes",
                             "Value #C": "speed", "Value #D": "maximum speed"})],
        overrides=[("regexp", ".*speed", [prop("unit", "suffix:T/s")])]))
    d = d.with_panel(timeseries_panel(
        "Port counters by kind",
        "Increases of the allowlisted port counters during the selected paths' bursts, by what they "
        "count (counter_kind) and end (side: local, or the responder's remote); port-level, so other "
        "traffic on the port counts too (docs/metrics.md, \"Port counters\").",
        8, 8, [query("A", f"sum by (instance, device, side, counter_kind) (increase(rdma_probe_port_increase_total{S}[$__rate_interval]))",
                     "{{instance}} {{device}} {{side}}: {{counter_kind}}")], bars=True, calcs=("sum", "max")))
    d = d.with_panel(timeseries_panel(
        "Other traffic",
        "Bytes per second the ports of the selected paths' ends sent and received during successful "
        "bursts beyond the bursts' own (docs/metrics.md, \"Other traffic\").",
        8, 8, [query("A", f"sum by (instance, device, side, direction) (rate(rdma_probe_port_other_traffic_bytes_total{S}[$__rate_interval]))",
                     "{{instance}} {{device}} {{side}} {{direction}}")], unit="Bps"))
    return d.with_panel(timeseries_panel(
        "Capacity bursts",
        "Each path's last capacity burst (unpaced, every unpaced_every-th probe) against the lower "
        "link rate of both ends (docs/metrics.md, \"Paced and capacity bursts\").",
        8, 8, [query("A", f'rdma_probe_bandwidth_bytes_per_second{CAPACITY}'
                          f' / (rdma_probe_target_bandwidth_bytes_per_second{CAPACITY} > 0)', LEGEND)],
        unit="percentunit"))


def build():
    d = dashboard(UID, "RDMA probes: path drilldown",
                  "rdma-probe-exporter: the nodes of one ToR pair, then one node's paths (or a few) over "
                  "time: bandwidth against target, stalls, completion gaps, message rate, errors, setup "
                  "time, pings (round trip, responder delay, loss), ports and PCIe links.", "now-3h")
    for part in (variables, tor_pair, paths, pings, ports):
        d = part(d)
    return d
