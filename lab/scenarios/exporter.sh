# Three nodes, each running the exporter (`run --config`) with the other two as peers (and
# itself in the list, skipped). In one boot:
#  1. every node's /metrics shows success 1 for both of its paths (scrape kept for promtool);
#  2. node3's exporter stops (SIGTERM): node1 and node2 show success 0 and rising
#     errors_total for node3 only, and success 1 again after node3 restarts;
#  3. node1 reloads: a file without node2 removes node2's series; a broken file keeps the old
#     config probing with config_reload_success 0 (POST /-/reload answers 400); a good file is
#     taken with POST /-/reload and SIGHUP leaves the exporter running; a file that gives node1
#     and node2 by address alone labels node2's path with its address and its peer_info with
#     the name it reports, and skips node1's own address once it said who it is;
#  4. node1 probes node2 with 10 s bursts and gets SIGTERM in the middle of one: it exits 0
#     within 2 s, and node2's responder keeps serving node3.
bin=rdma-probe-exporter
url=http://127.0.0.1:9587
(umask 077 && echo "bGFiLWV4cG9ydGVyLXBzay0wMTIzNDU2Nzg5YWJjZGVm" >/tmp/psk)
config=/tmp/exporter.yaml

# write_config [PEER...]: the exporter's config with these peers (default: all three, this node
# included: it is skipped). INTERVAL, BURST and DUTY override the schedule; the peers in
# BY_ADDRESS are written by address alone, without a name or labels. Written to a new file and
# renamed over the old one, as editors and ConfigMap updates do.
write_config() {
  local peers=("$@") p
  [ ${#peers[@]} -gt 0 ] || peers=(node1 node2 node3)
  {
    cat <<EOF
node: \${NODE_NAME}
labels: {lab: soft-roce}
auth: {psk_file: /tmp/psk}
devices:
  - {name: rxe0, port: 1, rail: 0}
schedule: {duty_cycle: ${DUTY:-20%}}
defaults:
  interval: ${INTERVAL:-4s}
  jitter: 10%
  message_size: 16KiB
  burst: {duration: ${BURST:-150ms}}
  rate_limit: 20Mbps
  unpaced_every: 0
  qp_timeout: 17
  timeout: 5s
peers:
EOF
    for p in "${peers[@]}"; do
      if [[ " ${BY_ADDRESS:-} " == *" $p "* ]]; then
        echo "  - {address: $(lab_addr "$p"):18516}"
      else
        echo "  - {name: $p, address: $(lab_addr "$p"):18516, labels: {rack: r$p}}"
      fi
    done
  } >"$config.new" && mv "$config.new" "$config"
}

start_exporter() {
  # Debug lines of the device worker say when each probe starts (step 4 waits for one).
  NODE_NAME=$LAB_NODE $bin --log-level info,rdma_probe_exporter::exporter::device=debug \
    run --config "$config" --enable-reload-endpoint >>exporter.log 2>&1 &
  exporter_pid=$!
}
# stop_exporter: SIGTERM; sets stop_seconds (to exit) and stop_status.
stop_exporter() {
  local t0 t1
  t0=$(date +%s.%N)
  kill -TERM "$exporter_pid"
  wait "$exporter_pid"
  stop_status=$?
  t1=$(date +%s.%N)
  stop_seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
}

success() { echo "rdma_probe_success{device=\"rxe0\",peer=\"$1\",peer_device=\"rxe0\"}"; }
no_series_of() { ! lab_scrape | grep -q "peer=\"$1\",peer_device"; }
others() { for n in node1 node2 node3; do [ "$n" != "$LAB_NODE" ] && echo "$n"; done; }

# 1. All up.
write_config
start_exporter
lab_wait_for "/readyz 200" 60 lab_ok "$url/readyz" || exit 1
lab_barrier exporters-up
t0=$SECONDS
for p in $(others); do lab_wait_for "success 1 for $p" 120 lab_is "$(success "$p")" 1 || exit 1; done
lab_result all_up_seconds $((SECONDS - t0))
lab_scrape >metrics-all-up.txt
curl -sS --max-time 5 "$url/" >status.html
lab_get "$url/readyz" >readyz.txt
lab_barrier all-up
# Every node has had both its probers' bursts succeed by now: its responder counts them.
lab_scrape >metrics-probers.txt

# 2. node3's exporter stops and comes back.
if [ "$LAB_NODE" = node3 ]; then
  stop_exporter
  lab_result peer_stop_seconds "$stop_seconds"
  lab_result peer_stop_status "$stop_status"
  lab_signal stopped
  lab_wait_signal node1 outage-seen 180 && lab_wait_signal node2 outage-seen 180 || exit 1
  start_exporter
  lab_signal restarted
else
  lab_wait_signal node3 stopped 120 || exit 1
  other=$(others | grep -v node3)
  errors_before=$(lab_sum rdma_probe_errors_total node3)
  other_errors_before=$(lab_sum rdma_probe_errors_total "$other")
  lab_wait_for "success 0 for node3" 60 lab_is "$(success node3)" 0 || exit 1
  lab_wait_for "errors for node3 rising" 60 lab_above rdma_probe_errors_total node3 $((errors_before + 1)) || exit 1
  lab_scrape >metrics-peer-down.txt
  lab_result outage_other_success "$(lab_value "$(success "$other")")"
  lab_result outage_other_errors_increase $(($(lab_sum rdma_probe_errors_total "$other") - other_errors_before))
  lab_signal outage-seen
  lab_wait_signal node3 restarted 180 || exit 1
  t0=$SECONDS
  lab_wait_for "success 1 again for node3" 120 lab_is "$(success node3)" 1 || exit 1
  lab_result recovered_seconds $((SECONDS - t0))
  lab_scrape >metrics-recovered.txt
fi
lab_barrier recovered

# 3. Reloads on node1.
if [ "$LAB_NODE" = node1 ]; then
  write_config node1 node3 # node2 removed: the file watcher reloads
  lab_wait_for "node2's series gone" 30 no_series_of node2 || exit 1
  lab_scrape >metrics-peer-removed.txt
  runs_before=$(lab_sum rdma_probe_runs_total node3)
  echo "peers: [ {name: broken" >"$config.new" && mv "$config.new" "$config"
  lab_wait_for "config_reload_success 0" 30 lab_is rdma_probe_config_reload_success 0 || exit 1
  lab_result broken_post_status "$(curl -s -o reload-broken.txt -w '%{http_code}' -X POST -H 'X-Rdma-Probe-Reload: 1' "$url/-/reload")"
  lab_wait_for "node3 still probed" 30 lab_above rdma_probe_runs_total node3 $((runs_before + 1)) || exit 1
  lab_scrape >metrics-broken-reload.txt
  write_config
  lab_result good_post_status "$(curl -s -o reload-good.txt -w '%{http_code}' -X POST -H 'X-Rdma-Probe-Reload: 1' "$url/-/reload")"
  lab_wait_for "config_reload_success 1" 30 lab_is rdma_probe_config_reload_success 1 || exit 1
  kill -HUP "$exporter_pid"
  lab_nap 2
  lab_result alive_after_sighup "$(kill -0 "$exporter_pid" 2>/dev/null && echo yes || echo no)"
  lab_result sighup_logged "$(grep -c 'SIGHUP: reloading' exporter.log)"
  lab_wait_for "node2 probed again" 60 lab_is "$(success node2)" 1 || exit 1
  # Peers by address alone (docs/metrics.md, "Peer identity").
  BY_ADDRESS="node1 node2" write_config
  lab_result node1_address "$(lab_addr node1)"
  lab_result node2_address "$(lab_addr node2)"
  lab_wait_for "node2 probed by its address" 60 lab_is "$(success "$(lab_addr node2)")" 1 || exit 1
  lab_wait_for "node1's own address skipped" 60 \
    lab_is 'rdma_probe_schedule_skipped_paths{device="rxe0",reason="itself"}' 1 || exit 1
  lab_scrape >metrics-by-address.txt
  lab_result itself_logged "$(grep -c 'path not probed: the peer is this node' exporter.log)"
  write_config
  lab_wait_for "node2 probed by name again" 60 lab_is "$(success node2)" 1 || exit 1
fi
lab_barrier reloads-done

# 4. SIGTERM in the middle of a burst.
if [ "$LAB_NODE" = node1 ]; then
  # 10 s bursts every 11 s. The reload is applied when POST /-/reload answers, so every probe
  # that starts after it has the new shape. A probe can also end at once (node2 answers `busy`
  # while node3's burst runs into it), so SIGTERM goes only once a probe started after the
  # reload is still running 0.7 s later. The guests are emulated and the burst loads them: each
  # check is one awk, and the burst is long enough for checks that take seconds.
  BURST=10s INTERVAL=11s DUTY=100% write_config node2
  lab_result midburst_reload_status "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'X-Rdma-Probe-Reload: 1' "$url/-/reload")"
  # probes: how many probes of node2 the log shows started, then how many ended.
  probes() { awk '/probe started.*node2/ { s++ } /probe ended.*node2/ { e++ } END { print s + 0, e + 0 }' exporter.log; }
  read -r before _ <<<"$(probes)"
  # in_flight: prints how many probes of node2 have started when one that started after the
  # reload is running (its "probe ended" not logged yet).
  in_flight() {
    local started ended
    read -r started ended <<<"$(probes)"
    [ "$started" -gt "$before" ] && [ "$started" -gt "$ended" ] && echo "$started"
  }
  long_burst_running() {
    local n
    n=$(in_flight) || return 1
    lab_nap 0.7
    [ "$(in_flight)" = "$n" ]
  }
  lab_wait_for "a long burst to node2 running" 60 long_burst_running || exit 1
  stop_exporter
  lab_result midburst_stop_seconds "$stop_seconds"
  lab_result midburst_stop_status "$stop_status"
  lab_result midburst_probe_ended "$(grep -c 'ending the running probe' exporter.log)"
  lab_signal node1-stopped
elif [ "$LAB_NODE" = node3 ]; then
  lab_wait_signal node1 node1-stopped 120 || exit 1
  runs=$(lab_sum rdma_probe_runs_total node2)
  lab_wait_for "node2 keeps serving node3" 60 lab_above rdma_probe_runs_total node2 $((runs + 1)) || exit 1
  lab_result node2_serves_after_midburst_stop "$(lab_value "$(success node2)")"
fi
lab_barrier midburst-done

# The exporters that still run stop cleanly; their scrape and log stay.
lab_scrape >metrics-final.txt 2>/dev/null
if kill -0 "$exporter_pid" 2>/dev/null; then
  stop_exporter
  lab_result final_stop_seconds "$stop_seconds"
  lab_result final_stop_status "$stop_status"
fi
exit 0
