"""RDMA probes: fleet overview (uid rdma-probe-fleet): the fleet at a glance, the suspects the
component alerts name, the worst paths, ToR x ToR per rail (bursts and pings), ports and capacity
(deploy/README.md, "Dashboards")."""

from grafana_foundation_sdk.builders import dashboard as db

from grafana import (RATIO_STEPS, dashboard, link, matrix, organize, prop, query, query_variable, sel,
                     stat_panel, table_panel, timeseries_panel)

UID = "rdma-probe-fleet"
# The pings: a median round trip from 100 us (RdmaProbePathLatencyHigh's floor) and from 1 ms; a
# loss from ping_loss_ratio (a lossy path) and from ping_loss_below (a total fault's).
RTT_STEPS = [(None, "green"), (0.0001, "orange"), (0.001, "red")]
LOSS_STEPS = [(None, "green"), (0.02, "orange"), (0.5, "red")]
S = sel()
# The whole-fleet panels read what deploy/prometheus/rules.yaml records for them (its
# rdma-probe-scale group), a few series each: at 250 nodes a selection of every path takes seconds.
JOB = '{job="$job"}'
TOR_LINK = ("/d/rdma-probe-path/rdma-probe-path-drilldown?${__url_time_range}&var-datasource=${datasource}"
            "&var-job=${job}&var-rail=${rail}&var-tor=${__data.fields[0]}&var-peer_tor=${__field.name}")
PATH_LINK = ("/d/rdma-probe-path/rdma-probe-path-drilldown?${__url_time_range}&var-datasource=${datasource}"
             "&var-job=${job}&var-node=${__data.fields.instance}&var-device=${__data.fields.device}"
             "&var-peer=${__data.fields.peer}")
NODE_LINK = ("/d/rdma-probe-path/rdma-probe-path-drilldown?${__url_time_range}&var-datasource=${datasource}"
             "&var-job=${job}&var-node=${__data.fields.instance}&var-device=${__data.fields.device}")
# A suspect's node and device (empty for a ToR uplink; a node alert has no device).
SUSPECT_LINK = ("/d/rdma-probe-path/rdma-probe-path-drilldown?${__url_time_range}&var-datasource=${datasource}"
                "&var-job=${job}&var-node=${__data.fields.node}&var-device=${__data.fields.device}"
                "&var-rail=${__data.fields.rail}")


def variables(d):
    d = d.with_variable(query_variable("node", "Node", 'label_values(rdma_probe_success{job="$job"}, instance)'))
    d = d.with_variable(query_variable(
        "device", "Device", 'label_values(rdma_probe_success{job="$job", instance=~"$node"}, device)'))
    d = d.with_variable(query_variable(
        "peer", "Peer", 'label_values(rdma_probe_success{job="$job", instance=~"$node"}, peer)'))
    d = d.with_variable(query_variable(
        "rail", "Rail", 'label_values(tor_pair_rail:rdma_probe_success:ratio{job="$job"}, rail)'))
    return d.with_variable(db.ConstantVariable("degraded_ratio").value("0.7").description(
        "THRESHOLDS['degraded_ratio'] of deploy/prometheus/generate (deploy/check keeps them equal)"))


def glance(d):
    d = d.with_panel(stat_panel("Pairs probed", "Node pairs (probing node, peer) and paths (node, device, peer, peer device) with a probe result.", 5, 4, [
        query("A", f"sum(job:rdma_probe_node_pairs:count{JOB})", "node pairs", instant=True),
        query("B", f"sum(job:rdma_probe_paths:count{JOB})", "paths", instant=True)], [(None, "blue")], names=True))
    d = d.with_panel(stat_panel("Success", "Share of paths whose last probe succeeded.", 4, 4, [
        query("A", f"avg(job:rdma_probe_success:ratio{JOB})")],
        [(None, "red"), (0.95, "orange"), (1, "green")], unit="percentunit", decimals=1))
    d = d.with_panel(stat_panel("Degraded paths", "Paths whose last successful paced burst achieved less than $degraded_ratio of its pace (the threshold of RdmaProbePathDegraded and RdmaProbePortDegraded, deploy/prometheus/generate); capacity bursts are not counted.", 4, 4, [
        query("A", f"count(path:rdma_probe_bandwidth_ratio:slow{S}) or vector(0)")],
        [(None, "green"), (1, "orange")]))
    d = d.with_panel(stat_panel("Errors per minute", "Failed probes per minute, all reasons.", 4, 4, [
        query("A", f"sum(rate(rdma_probe_errors_total{S}[$__rate_interval])) * 60 or vector(0)")],
        [(None, "green"), (0.01, "orange")], decimals=2))
    d = d.with_panel(stat_panel("Firing alerts", "RdmaProbe* alerts firing (the ALERTS series of the rules in deploy/prometheus/rules.yaml).", 4, 4, [
        query("A", 'count(ALERTS{alertname=~"RdmaProbe.*", alertstate="firing"}) or vector(0)')],
        [(None, "green"), (1, "red")]))
    return d.with_panel(stat_panel("Nodes", "Exporters up / scraped.", 3, 4, [
        query("A", 'sum(up{job="$job"})', "up", instant=True),
        query("B", 'count(up{job="$job"})', "targets", instant=True)], [(None, "blue")], names=True))


def suspects(d):
    d = d.with_row(db.Row("Suspects"))
    return d.with_panel(table_panel(
        "Suspects",
        "What the component alerts blame now: a path, a port, a node or a ToR uplink, and where "
        "(node, device, peer node, ToR, rail). One line per firing alert; docs/runbook.md has a "
        "section for each, and the alert's dashboard_url opens the dashboard for it. Click a row "
        "for the drilldown of its node and device.",
        24, 8,
        [query("A", 'ALERTS{alertname=~"RdmaProbe.*", alertstate="firing", component!=""}', instant=True,
               fmt="table")],
        transformations=[organize(
            exclude=["Time", "Value", "__name__", "alertstate", "job", "peer_device"],
            index={"component": 0, "node": 1, "device": 2, "peer_node": 3, "tor": 4, "rail": 5,
                   "alertname": 6, "severity": 7},
            rename={"alertname": "alert", "peer_node": "peer node", "tor": "ToR"})],
        links=[link("Drilldown of this node and device", SUSPECT_LINK)]))


def worst_paths(d):
    """The worst paths of the fleet, by bandwidth and by ping loss; a node x node view is the
    drilldown's, per ToR pair (at fleet size a node x node table of every node is neither readable
    nor cheap)."""
    d = d.with_row(db.Row("Worst paths"))
    d = d.with_panel(table_panel(
        "Worst paths",
        "The 25 paths with the lowest achieved / target bandwidth in their last successful paced "
        "burst; 0: the last probe failed. Failing paths into a peer whose exporter is not scraped "
        "(a node or exporter that is down: see Suspects) are left out "
        "(path:rdma_probe_bandwidth_ratio:worst). Click a row for its drilldown.",
        24, 10, [query("A", f"path:rdma_probe_bandwidth_ratio:worst{S}", instant=True, fmt="table")],
        transformations=[organize(exclude=["Time", "job", "__name__"],
                                  index={"instance": 0, "device": 1, "peer": 2, "peer_device": 3, "Value": 4},
                                  rename={"Value": "achieved / target"})],
        links=[link("Path drilldown", PATH_LINK)],
        overrides=[("name", "achieved / target", [
            prop("unit", "percentunit"), prop("decimals", 0),
            prop("custom.cellOptions", {"type": "color-background", "mode": "basic"}),
            prop("color", {"mode": "thresholds"}),
            prop("thresholds", {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in RATIO_STEPS]})])],
        sort_by="achieved / target"))
    return d.with_panel(table_panel(
        "Paths losing the most pings",
        "The 25 paths that lost the largest share of their pings over the rules' loss window "
        "(60 pings: path:rdma_probe_ping_loss_ratio:worst), but those into a peer whose exporter is "
        "not scraped (a node or exporter that is down answers no ping: see Suspects). From 2% a path "
        "is lossy; from half, its loss is a total fault's (a dead port or path), which the burst "
        "alerts name. Click a row for its drilldown.",
        24, 8, [query("A", f"path:rdma_probe_ping_loss_ratio:worst{S}", instant=True, fmt="table")],
        transformations=[organize(exclude=["Time", "job", "__name__", "node", "tor", "rail", "peer_node", "peer_tor"],
                                  index={"instance": 0, "device": 1, "peer": 2, "peer_device": 3, "Value": 4},
                                  rename={"Value": "pings lost"})],
        links=[link("Path drilldown", PATH_LINK)],
        overrides=[("name", "pings lost", [
            prop("unit", "percentunit"), prop("decimals", 1),
            prop("custom.cellOptions", {"type": "color-background", "mode": "basic"}),
            prop("color", {"mode": "thresholds"}),
            prop("thresholds", {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in LOSS_STEPS]})])]))


def tor_pairs(d):
    """One row per rail (repeated by the rail variable): ToR x ToR matrices of success and of
    the worst bandwidth ratio, and of the pings' median round trip and worst loss; a cell links
    to the node x node view of its ToR pair."""
    d = d.with_row(db.Row("ToR × ToR, rail $rail").repeat("rail"))
    rail = '{job="$job", rail=~"$rail"}'
    d = d.with_panel(table_panel(
        "Probes succeeding, ToR × ToR, rail $rail",
        "Rows: the probing node's ToR; columns: the peer's ToR. Each cell is the share of the "
        "pair's paths on this rail whose last probe succeeded (tor_pair_rail:rdma_probe_success:ratio). "
        "Click a cell for its nodes.",
        12, 10, [query("A", f"tor_pair_rail:rdma_probe_success:ratio{rail}", instant=True, fmt="table")],
        transformations=[matrix("tor", "peer_tor")], cells="color-background", unit="percentunit",
        decimals=0, steps=[(None, "red"), (0.95, "orange"), (1, "green")],
        links=[link("Node × node for this ToR pair", TOR_LINK)]))
    d = d.with_panel(table_panel(
        "Worst achieved / target, ToR × ToR, rail $rail",
        "Each cell is the worst last successful paced burst against its pace among the pair's paths "
        "on this rail (tor_pair_rail:rdma_probe_bandwidth_ratio:min). Click a cell for its nodes.",
        12, 10, [query("A", f"tor_pair_rail:rdma_probe_bandwidth_ratio:min{rail}", instant=True, fmt="table")],
        transformations=[matrix("tor", "peer_tor")], cells="color-background", unit="percentunit",
        decimals=0, steps=RATIO_STEPS, links=[link("Node × node for this ToR pair", TOR_LINK)]))
    d = d.with_panel(table_panel(
        "Median ping round trip, ToR × ToR, rail $rail",
        "Each cell is the median, over the pair's paths on this rail, of each path's median ping "
        "round trip over the exporters' ping window, the responder's delay taken out "
        "(tor_pair_rail:rdma_probe_ping_rtt_p50:median, recomputed with the rules' baselines: what "
        "RdmaProbePathLatencyHigh compares a path with). Orange from 100 µs (that alert's floor), "
        "red from 1 ms. Click a cell for its nodes.",
        12, 10, [query("A", f"tor_pair_rail:rdma_probe_ping_rtt_p50:median{rail}", instant=True, fmt="table")],
        transformations=[matrix("tor", "peer_tor")], cells="color-background", unit="s",
        decimals=1, steps=RTT_STEPS, links=[link("Node × node for this ToR pair", TOR_LINK)]))
    return d.with_panel(table_panel(
        "Worst ping loss, ToR × ToR, rail $rail",
        "Each cell is the largest share of its pings a path between the pair lost on this rail "
        "over the rules' loss window (60 pings; tor_pair_rail:rdma_probe_ping_loss_ratio:max). "
        "Orange from 2% (a lossy path: RdmaProbePathPacketLoss, RdmaProbePortPacketLoss, "
        "RdmaProbeTorUplinkPacketLoss), red from half (a dead port, node or path, which the burst "
        "alerts name). Click a cell for its nodes.",
        12, 10, [query("A", f"tor_pair_rail:rdma_probe_ping_loss_ratio:max{rail}", instant=True, fmt="table")],
        transformations=[matrix("tor", "peer_tor")], cells="color-background", unit="percentunit",
        decimals=1, steps=LOSS_STEPS, links=[link("Node × node for this ToR pair", TOR_LINK)]))


def over_time(d):
    d = d.with_row(db.Row("Over time"))
    d = d.with_panel(timeseries_panel("Errors by reason", 'Failed probes per minute by reason (docs/metrics.md, "Error reasons").', 12, 8, [
        query("A", f"sum by (reason) (rate(rdma_probe_errors_total{S}[$__rate_interval])) * 60", "{{reason}}")],
        bars=True, calcs=("sum", "max")))
    d = d.with_panel(timeseries_panel("Success over time", "Share of paths whose last probe succeeded.", 12, 8, [
        query("A", f"avg(job:rdma_probe_success:ratio{JOB})", "paths succeeding")],
        unit="percentunit", calcs=("lastNotNull", "min")))
    d = d.with_panel(timeseries_panel(
        "Achieved / target, worst 25 paths",
        "The 25 paths whose last successful paced burst was furthest below its pace at each "
        "evaluation, failing ones as 0 (path:rdma_probe_bandwidth_ratio:worst, as Worst paths). "
        "Capacity bursts (unpaced, every unpaced_every-th probe) aim at the link rate and are shown "
        "below.",
        12, 8, [query("A", f"path:rdma_probe_bandwidth_ratio:worst{S}",
                      "{{instance}} {{device}} → {{peer}} {{peer_device}}")],
        unit="percentunit", threshold=[(None, "red"), (0.7, "transparent")]))
    d = d.with_panel(timeseries_panel(
        "Ping loss, worst 25 paths",
        "The 25 paths that lost the largest share of their pings over the rules' loss window at "
        "each evaluation (path:rdma_probe_ping_loss_ratio:worst, as Paths losing the most pings); "
        "the dashed line is 2%, from which a path is lossy.",
        12, 8, [query("A", f"path:rdma_probe_ping_loss_ratio:worst{S}",
                      "{{instance}} {{device}} → {{peer}} {{peer_device}}")],
        unit="percentunit", threshold=[(None, "transparent"), (0.02, "orange")]))
    return d.with_panel(table_panel(
        "Alerts firing now", "RdmaProbe* alerts now (docs/runbook.md has a section for each).", 24, 8,
        [query("A", 'ALERTS{alertname=~"RdmaProbe.*", alertstate="firing"}', instant=True, fmt="table")],
        transformations=[organize(exclude=["Time", "Value", "__name__", "alertstate"])]))


def ports_capacity(d):
    d = d.with_row(db.Row("Ports and capacity"))
    port = sel(peer=False)
    d = d.with_panel(table_panel(
        "Port links, slowest against the fleet",
        "The 25 ports whose link rate is furthest below the fastest port of the same device name in "
        "the fleet (rdma_probe_port_rate_bytes_per_second; RdmaProbePortLinkBelowFleet compares with "
        "the median). Click a row for the node's port facts.",
        12, 8, [query("A", f"bottomk(25, rdma_probe_port_rate_bytes_per_second{port} / on(job, device) "
                           'group_left() max by (job, device) (rdma_probe_port_rate_bytes_per_second{job="$job"}))',
                      instant=True, fmt="table")],
        transformations=[organize(exclude=["Time", "job", "__name__"], rename={"Value": "rate / fleet's fastest"})],
        links=[link("Path drilldown", NODE_LINK)],
        overrides=[("name", "rate / fleet's fastest", [prop("unit", "percentunit"), prop("decimals", 0)])],
        sort_by="rate / fleet's fastest"))
    d = d.with_panel(table_panel(
        "PCIe links, narrowest and slowest against their maximum",
        "The 25 devices whose negotiated PCIe link is furthest below what the function supports: "
        "the lower of width / maximum width and speed / maximum speed (RdmaProbePcieLinkDegraded).",
        12, 8, [query("A", f"bottomk(25, min by (job, instance, device) ("
                           f"rdma_probe_pcie_link_width_lanes{port} / (rdma_probe_pcie_link_max_width_lanes{port} > 0)"
                           f" or rdma_probe_pcie_link_speed_transfers_per_second{port}"
                           f" / (rdma_probe_pcie_link_max_speed_transfers_per_second{port} > 0)))",
                      instant=True, fmt="table")],
        transformations=[organize(exclude=["Time", "job"], rename={"Value": "link / maximum"})],
        links=[link("Path drilldown", NODE_LINK)],
        overrides=[("name", "link / maximum", [prop("unit", "percentunit"), prop("decimals", 0)])],
        sort_by="link / maximum"))
    d = d.with_panel(table_panel(
        "Capacity bursts, slowest paths",
        "The 25 paths whose last capacity burst (kind=\"capacity\": unpaced, every unpaced_every-th "
        "probe) reached the smallest share of the lower link rate of both ends (docs/metrics.md, "
        "\"Paced and capacity bursts\"; path:rdma_probe_capacity_ratio:worst). Click a row for its "
        "drilldown.",
        12, 8, [query("A", f"path:rdma_probe_capacity_ratio:worst{S}", instant=True, fmt="table")],
        transformations=[organize(exclude=["Time", "job"],
                                  index={"instance": 0, "device": 1, "peer": 2, "peer_device": 3, "Value": 4},
                                  rename={"Value": "achieved / link rate"})],
        links=[link("Path drilldown", PATH_LINK)],
        overrides=[("name", "achieved / link rate", [prop("unit", "percentunit"), prop("decimals", 0)])],
        sort_by="achieved / link rate"))
    return d.with_panel(timeseries_panel(
        "Port counter increases by kind",
        "Increases of the allowlisted port counters during bursts, by what they count "
        "(rdma_probe_port_increase_total's counter_kind), both ends (docs/metrics.md, \"Port counters\").",
        12, 8, [query("A", f"sum by (counter_kind) (increase(rdma_probe_port_increase_total{S}[$__rate_interval]))",
                      "{{counter_kind}}")], bars=True, calcs=("sum", "max")))


def build():
    d = dashboard(UID, "RDMA probes: fleet overview",
                  "rdma-probe-exporter: every probed path of the fleet at a glance. Nodes are Prometheus "
                  "targets (`instance`); peers are names from the exporter config.", "now-6h")
    for part in (variables, glance, suspects, worst_paths, tor_pairs, over_time, ports_capacity):
        d = part(d)
    return d
