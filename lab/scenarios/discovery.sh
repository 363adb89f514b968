# Three nodes find their peers by DNS only (no `peers` in the config): node1 runs dnsmasq on the
# lab network with a hosts file for `peers.lab` that it edits, and every node resolves
# `peers.lab:18516` every 2 s (`refresh_interval: 2s`, `forget_after: 20s`). In one boot, on
# node1's /metrics:
#  1. peers.lab holds node1 and node2: node1 skips itself (its own address) and probes node2;
#     node3 (not in DNS) has no series;
#  2. node3's record is added: its paths appear and succeed;
#  3. node2's record is removed and node2's exporter stops: node2's paths stay and fail (a dying
#     node alerts) until forget_after, then every series of node2 goes;
#  4. dnsmasq stops: lookups fail (errors_total rises), the last good set stays: node3 is still
#     probed after forget_after has passed again.
# No node has a `tor` label in its config: each takes its ToR (and spine) from a Slurm
# topology.conf (node1 and node2 under leaf0, node3 under leaf1), tells its probers, and so
# node1's path to node3 is judged as crossing ToRs.
bin=rdma-probe-exporter
url=http://127.0.0.1:9587
(umask 077 && echo "bGFiLWRpc2NvdmVyeS1wc2stMDEyMzQ1Njc4OWFiY2RlZg==" >/tmp/psk)
config=/tmp/exporter.yaml
hosts=/tmp/peers.hosts
dns_source='source="dns:peers.lab:18516"'
forget_after=20

# Every node asks node1's dnsmasq: the guest's root is the host's, read-only, so its resolver
# file is replaced by a bind mount (the mount is the guest's alone).
echo "nameserver $(lab_addr node1)" >/tmp/resolv.conf
mount --bind /tmp/resolv.conf /etc/resolv.conf || { echo "cannot bind-mount /etc/resolv.conf"; exit 1; }

# write_hosts NODE...: peers.lab resolves to these nodes; dnsmasq re-reads the file on SIGHUP.
write_hosts() {
  local n
  for n in "$@"; do echo "$(lab_addr "$n") peers.lab"; done >"$hosts.new" && mv "$hosts.new" "$hosts"
  [ -f /tmp/dnsmasq.pid ] && kill -HUP "$(cat /tmp/dnsmasq.pid)"
  date +%s.%N
}

# As Slurm's tree plugin reads it.
cat >/tmp/topology.conf <<'EOF'
# leaves, then the spine above them
SwitchName=leaf0 Nodes=node[1-2] LinkSpeed=100
SwitchName=leaf1 Nodes=node3
SwitchName=spine0 Switches=leaf[0-1]
EOF

cat >"$config" <<EOF
node: \${NODE_NAME}
auth: {psk_file: /tmp/psk}
topology: {slurm: /tmp/topology.conf}
devices:
  - {name: rxe0, port: 1, rail: 0}
schedule: {duty_cycle: 20%}
defaults:
  interval: 3s
  jitter: 10%
  message_size: 16KiB
  burst: {duration: 150ms}
  rate_limit: 20Mbps
  unpaced_every: 0
  qp_timeout: 17
  timeout: 3s
discovery:
  dns: [peers.lab:18516]
  refresh_interval: 2s
  forget_after: ${forget_after}s
EOF

start_exporter() {
  NODE_NAME=$LAB_NODE $bin --log-level info run --config "$config" >>exporter.log 2>&1 &
  exporter_pid=$!
}
# stop_exporter WHEN: SIGTERM, and its exit status as the result WHEN_stop_status.
stop_exporter() { kill -TERM "$exporter_pid"; wait "$exporter_pid"; lab_result "$1_stop_status" "$?"; }

success() { echo "rdma_probe_success{device=\"rxe0\",peer=\"$(lab_addr "$1")\",peer_device=\"rxe0\"}"; }
series_of() { lab_scrape | grep -c "peer=\"$(lab_addr "$1")\""; }
no_series_of() { [ "$(series_of "$1")" = 0 ]; }
# sum FAMILY NODE / above FAMILY NODE N: lab_sum and lab_above of a node (the peer label is
# its address: peers are found by DNS).
sum() { lab_sum "$1" "$(lab_addr "$2")"; }
above() { lab_above "$1" "$(lab_addr "$2")" "$3"; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

if [ "$LAB_NODE" = node1 ]; then
  write_hosts node1 node2 >/dev/null
  dnsmasq --keep-in-foreground --no-resolv --no-hosts --addn-hosts="$hosts" --local=/lab/ \
    --listen-address="$(lab_addr node1)" --bind-interfaces --user=root --group=root \
    --pid-file=/tmp/dnsmasq.pid --log-queries --log-facility=- >dnsmasq.log 2>&1 &
  dnsmasq_pid=$!
fi
lab_wait_for "peers.lab resolves" 120 getent ahostsv4 peers.lab >/dev/null || { cat "$LAB_RUN/nodes/node1/dnsmasq.log"; exit 1; }
start_exporter
lab_wait_for "/readyz 200" 60 lab_ok "$url/readyz" || exit 1
lab_barrier exporters-up

if [ "$LAB_NODE" = node1 ]; then
  # 1. node2 found and probed; node1 itself and node3 not.
  lab_wait_for "success 1 for node2" 60 lab_is "$(success node2)" 1 || exit 1
  lab_wait_for "2 peers from DNS" 30 lab_is "rdma_probe_discovery_peers{$dns_source}" 2 || exit 1
  lab_scrape >metrics-initial.txt
  lab_result initial_self_series "$(series_of node1)"
  lab_result initial_node3_series "$(series_of node3)"

  # 2. node3's record added.
  t_add=$(write_hosts node1 node2 node3)
  lab_wait_for "success 1 for node3" 60 lab_is "$(success node3)" 1 || exit 1
  lab_result added_success_seconds "$(since "$t_add")"
  lab_scrape >metrics-added.txt

  # 3. node2's record removed, and node2's exporter stops.
  t_remove=$(write_hosts node1 node3)
  lab_signal removed
  lab_result remove_at "$t_remove"
  lab_wait_for "1 vanished peer" 30 lab_is rdma_probe_discovery_vanished_peers 1 || exit 1
  lab_scrape >metrics-vanished.txt
  lab_result vanished_seconds "$(since "$t_remove")"
  lab_wait_for "success 0 for node2" 60 lab_is "$(success node2)" 0 || exit 1
  lab_scrape >metrics-failing.txt
  lab_result failing_seconds "$(since "$t_remove")"
  lab_wait_for "node2's series gone" 90 no_series_of node2 || exit 1
  lab_result gone_seconds "$(since "$t_remove")"
  lab_scrape >metrics-forgotten.txt
  lab_result forgotten_node3_success "$(lab_value "$(success node3)")"

  # 4. The DNS server stops: the last good set stays, past forget_after.
  kill -TERM "$dnsmasq_pid"; wait "$dnsmasq_pid" 2>/dev/null
  t_dns=$(date +%s.%N)
  lab_wait_for "DNS errors counted" 60 lab_at_least "rdma_probe_discovery_errors_total{$dns_source}" 1 || exit 1
  lab_result dns_error_seconds "$(since "$t_dns")"
  lab_nap $((forget_after + 5))
  runs_before=$(sum rdma_probe_runs_total node3)
  lab_wait_for "node3 still probed" 30 above rdma_probe_runs_total node3 "$runs_before" || exit 1
  lab_scrape >metrics-dns-down.txt
  lab_result dns_down_node3_success "$(lab_value "$(success node3)")"
  lab_result dns_down_peers "$(lab_value "rdma_probe_discovery_peers{$dns_source}")"
  lab_result dns_down_errors "$(lab_value "rdma_probe_discovery_errors_total{$dns_source}")"
  lab_signal done
elif [ "$LAB_NODE" = node2 ]; then
  lab_wait_signal node1 removed 180 || exit 1
  stop_exporter removed
  lab_wait_signal node1 done 240 || exit 1
  exit 0
else
  lab_wait_signal node1 done 300 || exit 1
fi
lab_scrape >metrics-final.txt 2>/dev/null
stop_exporter final
exit 0
