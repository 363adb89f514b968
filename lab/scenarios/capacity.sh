# Capacity bursts against a rate cap (tests/lab/capacity.rs). Two nodes in one boot: node2 serves
# (the `responder` command), node1 probes it.
#  1. capacity: an unpaced burst measures the link; then a tbf cap at half of that on node1's
#     lab NIC (the direction the data goes); under the cap a burst paced at a fifth of the link
#     still keeps its pace while an unpaced burst shows the cap; then the exporter on node1,
#     every other burst unpaced (`unpaced_every: 2`), under the same cap: its paced and capacity
#     gauges (`kind`) apart.
#  2. ECMP paths: netem slows only node1's RoCE packets whose UDP source port is a multiple of 4
#     (one of every four consecutive ports) to 5% of the capacity measured in 1; three unpaced
#     4-QP bursts on one warm session: each QP has its own port, the ports move on from burst to
#     burst, and the QP on a slowed port is the slowest. node2 captures the closing WRITE WITH
#     IMMEDIATE of every QP (BTH opcode 0x09 or 0x0b: one per QP and burst) to see the ports on
#     the wire.
bin=rdma-probe-exporter
(umask 077 && echo "bGFiLWNhcGFjaXR5LXBzay0wMTIzNDU2Nzg5YWJjZGVm" >/tmp/psk)
case $LAB_NODE in
  node2)
    $bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk >responder.log 2>&1 &
    responder=$!
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    lab_signal responder-up
    lab_wait_signal node1 ecmp-start 600 || exit 1
    timeout 300 tcpdump -l -n -p -i "$LAB_NIC" -c 48 \
      "src host $(lab_addr node1) and udp dst port 4791 and (udp[8] == 0x09 or udp[8] == 0x0b)" \
      >closing-writes.txt 2>tcpdump.err &
    capture=$!
    lab_nap 1
    lab_signal capturing
    lab_wait_signal node1 done 900
    kill $capture 2>/dev/null; wait $capture
    kill -TERM $responder; wait $responder; echo "responder exit=$?" >>exits
    ;;
  node1)
    lab_wait_signal node2 responder-up || exit 1
    peer=$(lab_addr node2):18516
    # QP timeout 17 (~0.5 s): under full emulation an ACK can take longer than 67 ms (lab/README.md).
    probe() { $bin probe "$peer" --device rxe0 --psk-file /tmp/psk --json --qp-timeout 17 "$@"; }

    # 1. Capacity, free and capped.
    probe --rate-limit unpaced --duration 3s >capacity-free.json; echo "capacity-free exit=$?" >>exits
    cap_mbps=$(lab_link_fraction_mbps capacity-free.json 50) || exit 1
    pace_mbps=$(lab_link_fraction_mbps capacity-free.json 20) || exit 1
    lab_result cap_mbps "$cap_mbps"
    lab_result pace_mbps "$pace_mbps"
    lab_tbf "${cap_mbps}mbit"
    probe --rate-limit "${pace_mbps}Mbps" --duration 3s >paced-capped.json
    echo "paced-capped exit=$?" >>exits
    probe --duration 3s >capacity-capped.json; echo "capacity-capped exit=$?" >>exits

    # The exporter, still under the cap: 1 s bursts every 3 s, every other one unpaced.
    cat >/tmp/exporter.yaml <<EOC
node: $LAB_NODE
auth: {psk_file: /tmp/psk}
listen: {metrics: 127.0.0.1:9587, control: 0.0.0.0:18516}
devices:
  - {name: rxe0, port: 1}
schedule: {duty_cycle: 60%}
defaults:
  interval: 3s
  jitter: 0%
  burst: {duration: 1s}
  rate_limit: ${pace_mbps}Mbps
  unpaced_every: 2
  qp_timeout: 17
  timeout: 10s
peers:
  - {name: node2, address: $peer}
EOC
    $bin run --config /tmp/exporter.yaml >exporter.log 2>&1 &
    exporter=$!
    runs='rdma_probe_runs_total{device="rxe0",peer="node2",peer_device="rxe0",result="success"}'
    lab_wait_metric http://127.0.0.1:9587/metrics "$runs" 4 120 || { cat exporter.log; exit 1; }
    lab_get http://127.0.0.1:9587/metrics >capacity-metrics.txt
    echo "capacity-metrics exit=$?" >>exits
    kill -TERM $exporter; wait $exporter; echo "exporter exit=$?" >>exits
    lab_clear_faults

    # 2. ECMP paths.
    slow_mbps=$(lab_link_fraction_mbps capacity-free.json 5) || exit 1
    lab_result slow_mbps "$slow_mbps"
    lab_slow_roce_ports 0 0x3 rate "${slow_mbps}mbit" || exit 1
    lab_signal ecmp-start
    lab_wait_signal node2 capturing 60 || exit 1
    probe --qps 4 --size 16KiB --messages 320 --bursts 3 >ecmp.json; echo "ecmp exit=$?" >>exits
    tc -s qdisc show dev "$LAB_NIC" >ecmp-qdisc.txt
    lab_clear_faults

    lab_signal done
    cat exits
    ;;
esac
