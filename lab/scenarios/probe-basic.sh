# Two nodes: node2 runs the responder, node1 probes it: a validated burst, a paced burst at 40% of
# the bandwidth that burst measured,
# a probe to a port with no responder, a wrong PSK, and a second prober during a burst (busy);
# then node1 scrapes the responder's /metrics, and probes node2 through a second address of
# node2's, which its RDMA address (GID) does not carry: refused unless that network is allowed.
# node2 checks that the ACKs of a probe in traffic class 104 (DSCP 26) carry that class on the
# wire.
bin=rdma-probe-exporter
(umask 077 && echo "bGFiLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZC1wYWRkZWQ=" >/tmp/psk)
(umask 077 && echo "c29tZS1vdGhlci1rZXktMDEyMzQ1Njc4OS1wYWRkZWQ=" >/tmp/wrong-psk)
# node2's second address: its own plus 100 in the last octet, inside the lab's network.
second_addr() { lab_addr node2 | awk -F. '{print $1"."$2"."$3"."($4 + 100)}'; }
case $LAB_NODE in
  node2)
    $bin --log-level debug responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk \
      --metrics-listen 0.0.0.0:9587 >responder.log 2>&1 &
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    # RoCE v2 packets this node sends are the responder's ACKs: capture the first few whose IP
    # DSCP is 26 (traffic class 104), which only the long probe asks for.
    timeout 300 tcpdump -n -p -i "$LAB_NIC" -c 5 \
      "src host $(lab_addr node2) and udp dst port 4791 and (ip[1] & 0xfc) == 104" >acks-dscp26.txt 2>tcpdump.err &
    capture=$!
    # A second address on the same NIC, added after the responder chose its GID (node2's first
    # address): a control connection to it reaches a responder whose RDMA address is elsewhere.
    ip addr add "$(second_addr)/24" dev "$LAB_NIC" || exit 1
    lab_nap 1
    lab_signal responder-up
    lab_wait_signal node1 done 600
    kill -TERM %1
    wait %1
    echo "responder exit=$?" >>exits
    cat exits
    kill $capture 2>/dev/null; wait $capture
    lab_result acks_dscp26 "$(grep -c ' > ' acks-dscp26.txt)"
    ;;
  node1)
    lab_wait_signal node2 responder-up || exit 1
    peer=$(lab_addr node2):18516
    # QP timeout 17 (~0.5 s) instead of 14 (67 ms): under full emulation an ACK can take longer
    # than 67 ms, and the spurious retransmits that follow (rxe counters: completer_retry_err,
    # duplicate_request) cost the loaded VM the CPU the paced sender needs to stay on time.
    probe() { $bin probe "$peer" --device rxe0 --psk-file /tmp/psk --json --qp-timeout 17 "$@"; }
    probe --messages 200 >success.json; echo "success exit=$?" >>exits
    # Paced at 40% of the link just measured (a fixed limit would be most of a slow machine's
    # link), for ~8 s: the last completion trails the last post by a transfer plus an ACK delay
    # (tens of ms on this emulated link), which biases a short burst's rate low.
    paced_mbps=$(lab_link_fraction_mbps success.json 40) || exit 1
    lab_result paced_mbps "$paced_mbps"
    probe --messages "$(lab_messages_for "$paced_mbps" 8)" --rate-limit "${paced_mbps}Mbps" >paced.json
    echo "paced exit=$?" >>exits
    # An unpaced burst longer than --timeout: the timeout bounds stalls, not the burst.
    # ~8 s at the link's measured rate, whatever this machine's link does.
    long_messages=$(lab_messages_for "$(lab_link_fraction_mbps success.json 100)" 8) || exit 1
    lab_result long_messages "$long_messages"
    probe --messages "$long_messages" --timeout 5s >long-unpaced.json; echo "long-unpaced exit=$?" >>exits
    $bin probe "$(lab_addr node2):1" --device rxe0 --psk-file /tmp/psk --json --messages 10 >refused.json
    echo "refused exit=$?" >>exits
    $bin probe "$peer" --device rxe0 --psk-file /tmp/wrong-psk --json --messages 10 >wrong-psk.json
    echo "wrong-psk exit=$?" >>exits
    # A long paced burst, and a second prober while it runs.
    # In a lossless-style class (DSCP 26): the responder ACKs in the same class.
    probe --duration 8s --rate-limit "$(lab_link_fraction_mbps success.json 15)Mbps" --traffic-class 104 --service-level 3 >long.json &
    long=$!
    # The busy prober must arrive while that burst runs: wait for the responder to have set its
    # session up (the 4th accepted; under load setup takes 0.3-2 s), then into its 8 s burst.
    lab_wait_metric "http://$(lab_addr node2):9587/metrics" \
      'rdma_probe_responder_sessions_total{device="rxe0",result="accepted"}' 4 60 || exit 1
    lab_nap 2
    probe --messages 10 >busy.json; echo "busy exit=$?" >>exits
    wait $long; echo "long exit=$?" >>exits
    # The responder's counters and process metrics, as Prometheus would scrape them.
    curl -sS --max-time 10 "http://$(lab_addr node2):9587/metrics" >responder-metrics.txt
    echo "metrics exit=$?" >>exits
    curl -sS --max-time 10 "http://$(lab_addr node2):9587/readyz" >responder-readyz.txt
    # Through node2's second address: the responder's GID carries its first one.
    elsewhere() { $bin probe "$(second_addr):18516" --device rxe0 --psk-file /tmp/psk --json --qp-timeout 17 --messages 10 "$@"; }
    elsewhere >elsewhere.json; echo "elsewhere exit=$?" >>exits
    lab_net=$(lab_addr node2 | awk -F. '{print $1"."$2"."$3".0/24"}')
    elsewhere --rdma-network "$lab_net" >elsewhere-allowed.json; echo "elsewhere-allowed exit=$?" >>exits
    cat exits
    lab_signal done
    ;;
esac
