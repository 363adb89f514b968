# Other traffic and loss (tests/lab/traffic.rs). Three nodes in one boot.
#  1. Other traffic: node2 and node3 serve (`responder`), node1's exporter probes both (500 ms
#     bursts of 16 KiB messages at 10 Mbps, every 2 s). After a quiet start, a stock ib_write_bw
#     from node2 to node1 runs for 40 s: it crosses node1's and node2's ports, not node3's. node1
#     scrapes its /metrics after the quiet start (base), as the background runs (bg-start), once
#     every path's burst under way at its end has completed (bg-end) and two bursts per path
#     later (after).
#  2. Loss: node2's link loses 1% of packets both ways (netem on node2, and on node1's and
#     node3's packets to node2); every node in turn probes the two others (`probe`, 2 s paced),
#     one probe at a time, so no other burst shares a port with it.
bin=rdma-probe-exporter
(umask 077 && echo "bGFiLXRyYWZmaWMtcHNrLTAxMjM0NTY3ODlhYmNkZWY=" >/tmp/psk)
serve() {
  $bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk >responder.log 2>&1 &
  responder=$!
  lab_wait_listening 18516 || { cat responder.log; exit 1; }
}
scrape() { lab_get http://127.0.0.1:9587/metrics >"$1.txt"; echo "$1 exit=$?" >>exits; }
runs() { echo "rdma_probe_runs_total{device=\"rxe0\",peer=\"$1\",peer_device=\"rxe0\",result=\"success\"}"; }
# wait_peer_runs PEER N: until node1's exporter has N successful bursts on its path to PEER.
wait_peer_runs() {
  lab_wait_metric http://127.0.0.1:9587/metrics "$(runs "$1")" "$2" 120 || { cat exporter.log; exit 1; }
}
# wait_runs N: the same on each path.
wait_runs() { for peer in node2 node3; do wait_peer_runs $peer "$1"; done; }
# count_runs FILE PEER: the successful bursts of node1's path to PEER in a scrape.
count_runs() { awk -v s="$(runs "$2")" 'index($0, s " ") == 1 {print $2}' "$1.txt"; }
# most_runs FILE: the larger of node1's two paths' successful bursts in a scrape.
most_runs() {
  local a b
  a=$(count_runs "$1" node2) b=$(count_runs "$1" node3)
  echo $(( ${a:-0} > ${b:-0} ? ${a:-0} : ${b:-0} ))
}
probe() {
  $bin probe "$(lab_addr "$1"):18516" --device rxe0 --psk-file /tmp/psk --json --qp-timeout 17 \
    --size 16KiB --duration 2s --rate-limit 10Mbps >"loss-to-$1.json"
  echo "loss-to-$1 exit=$?" >>exits
}

# 1. Other traffic.
case $LAB_NODE in
  node1)
    lab_wait_signal node2 served 120 && lab_wait_signal node3 served 120 || exit 1
    cat >/tmp/exporter.yaml <<EOC
node: node1
auth: {psk_file: /tmp/psk}
listen: {metrics: 127.0.0.1:9587, control: 0.0.0.0:18516}
devices:
  - {name: rxe0, port: 1}
schedule: {duty_cycle: 60%}
defaults:
  interval: 2s
  jitter: 0%
  message_size: 16KiB
  burst: {duration: 500ms}
  rate_limit: 10Mbps
  unpaced_every: 0
  qp_timeout: 17
  timeout: 10s
peers:
  - {name: node2, address: $(lab_addr node2):18516}
  - {name: node3, address: $(lab_addr node3):18516}
EOC
    $bin run --config /tmp/exporter.yaml >exporter.log 2>&1 &
    exporter=$!
    wait_runs 3
    scrape base
    ib_write_bw -d rxe0 -x 1 -D 40 >perftest-server.txt 2>&1 &
    perftest=$!
    lab_wait_listening 18515 || exit 1
    lab_signal background-server
    lab_wait_signal node2 background-running 60 || exit 1
    # The busy window: from a scrape while the background runs (it runs 40 s: on a host running
    # five VMs the scrape came 16 s after it started) to one right after it ended. The stock
    # client busy-polls node2's one vCPU, so node2's responder serves little until it ends.
    scrape bg-start
    lab_wait_signal node2 background-done 120 || exit 1
    # A burst under way when the background ended read the port counters from its start, so its
    # background bytes count on its completion: the busy window ends after one more completed
    # burst on each path (a burst begun after the end adds nothing to the window but a quiet
    # burst).
    scrape bg-done
    for peer in node2 node3; do wait_peer_runs $peer $(( $(count_runs bg-done $peer) + 1 )); done
    scrape bg-end
    wait $perftest
    wait_runs $(( $(most_runs bg-end) + 2 ))
    scrape after
    kill -TERM $exporter; wait $exporter; echo "exporter exit=$?" >>exits
    serve
    lab_signal served-again
    ;;
  node2)
    serve
    lab_signal served
    lab_wait_signal node1 background-server 300 || exit 1
    ib_write_bw -d rxe0 -x 1 -D 40 "$(lab_addr node1)" >perftest-client.txt 2>&1 &
    perftest=$!
    # Into its measured part (perftest's -D counts the middle of the run).
    lab_nap 3
    lab_signal background-running
    wait $perftest; echo "perftest exit=$?" >>exits
    lab_signal background-done
    ;;
  node3)
    serve
    lab_signal served
    ;;
esac

# 2. Loss on node2's link, both ways.
[ "$LAB_NODE" = node1 ] || lab_wait_signal node1 served-again 300 || exit 1
case $LAB_NODE in
  node2) lab_netem loss 1% ;;
  *) lab_netem_to "$(lab_addr node2)" loss 1% ;;
esac
lab_barrier lossy || exit 1
tc -s qdisc show dev "$LAB_NIC" >loss-qdisc-before.txt
case $LAB_NODE in
  node1) probe node2; probe node3 ;;
  node2) lab_wait_signal node1 probed 120 || exit 1; probe node1; probe node3 ;;
  node3) lab_wait_signal node2 probed 120 || exit 1; probe node1; probe node2 ;;
esac
lab_signal probed
lab_wait_signal node3 probed 300 || exit 1
tc -s qdisc show dev "$LAB_NIC" >loss-qdisc.txt
lab_clear_faults
lab_barrier done || exit 1
kill -TERM $responder; wait $responder; echo "responder exit=$?" >>exits
cat exits
