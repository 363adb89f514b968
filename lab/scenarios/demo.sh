# The demo, the exporter's main job: first every link is measured with stock ib_write_bw, one
# pair at a time, for reference; then every node runs the exporter (`run --config` with the lab's
# config, config/lab.yaml: the other two nodes as peers, itself in the list and skipped) until
# each of its paths has succeeded and DEMO_SECONDS more, and keeps its /metrics, its status page
# and its log.
bin=rdma-probe-exporter
url=http://127.0.0.1:9587
N=${DEMO_MESSAGES:-300}
(umask 077 && echo "bGFiLWRlbW8tcHNrLTAxMjM0NTY3ODlhYmNkZWYtcGFkZGVk" >/tmp/psk) # config/lab.yaml: auth: {psk_file: /tmp/psk}
lab_barrier booted
pair() { # pair ROUND CLIENT SERVER
  lab_perftest_pair "$2" "$3" "$1" -d rxe0 -x 1 -n "$N" -F --report_gbits || return 1
  lab_barrier "round-$1"
}
pair 1 node1 node2 && pair 2 node2 node3 && pair 3 node3 node1 || exit 1

NODE_NAME=$LAB_NODE $bin run --config /mnt/files/lab.yaml >exporter.log 2>&1 &
exporter=$!
ok() { curl -sf -o /dev/null --max-time 3 "$url/readyz"; }
for _ in $(seq 120); do ok && break; sleep 0.5; done
ok || { cat exporter.log; exit 1; }
lab_barrier exporters-up
# Until every path of this node has succeeded once (at most 90 s), then DEMO_SECONDS more.
start=$SECONDS
until [ "$(curl -sS --max-time 3 "$url/metrics" | grep -c '^rdma_probe_success{.*} 1$')" -ge 2 ]; do
  [ $((SECONDS - start)) -ge 90 ] && break
  sleep 1
done
lab_result first_success_seconds $((SECONDS - start))
sleep "${DEMO_SECONDS:-30}"
curl -sS --max-time 10 "$url/metrics" >metrics.txt
curl -sS --max-time 10 "$url/" >status.html
lab_barrier scraped
kill -TERM "$exporter"
wait "$exporter"
