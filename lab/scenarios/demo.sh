# The demo: every node runs the responder (with /metrics); each node probes the next one
# (node1->node2, node2->node3, node3->node1) with stock ib_write_bw and with our probe, one pair
# at a time; then each node scrapes its own responder's /metrics.
bin=rdma-probe-exporter
N=${DEMO_MESSAGES:-300}
echo "lab-demo-psk-0123456789abcdef" >/tmp/psk
$bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk \
  --metrics-listen 0.0.0.0:9587 >responder.log 2>&1 &
lab_wait_listening 18516 || { cat responder.log; exit 1; }
lab_barrier responders-up
pair() { # pair ROUND CLIENT SERVER
  local round=$1 client=$2 server=$3
  lab_perftest_pair "$client" "$server" "$round" -d rxe0 -x 1 -n "$N" -F --report_gbits || return 1
  if [ "$LAB_NODE" = "$client" ]; then
    $bin probe "$(lab_addr "$server"):18516" --device rxe0 --psk-file /tmp/psk --messages "$N" \
      >"probe-$round.txt" 2>&1
    $bin probe "$(lab_addr "$server"):18516" --device rxe0 --psk-file /tmp/psk --messages "$N" \
      --json >"probe-$round.json" 2>/dev/null
  fi
  lab_barrier "round-$round"
}
pair 1 node1 node2 && pair 2 node2 node3 && pair 3 node3 node1
status=$?
# What Prometheus would scrape from this node's responder.
curl -sS --max-time 10 http://127.0.0.1:9587/metrics >metrics.txt
kill -TERM %1 2>/dev/null
exit $status
