# Two nodes: node1 runs a long paced burst against node2's responder and, mid-burst, node2 is
# powered off. The probe must end with wc_retry_exceeded or timeout within its timeout.
bin=rdma-probe-exporter
(umask 077 && echo "bGFiLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZC1wYWRkZWQ=" >/tmp/psk)
case $LAB_NODE in
  node2)
    $bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk >responder.log 2>&1 &
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    lab_signal responder-up
    lab_nap 600 # powered off by node1 long before this ends
    ;;
  node1)
    lab_wait_signal node2 responder-up || exit 1
    start=$(date +%s.%N)
    $bin probe "$(lab_addr node2):18516" --device rxe0 --psk-file /tmp/psk --json \
      --duration 60s --rate-limit 10Mbps --timeout 5s >loss.json &
    probe=$!
    lab_nap 3
    stopped=$(date +%s.%N)
    lab_stop_node node2 || exit 1
    wait $probe
    echo "probe exit=$?"
    ended=$(date +%s.%N)
    lab_result seconds_after_stop "$(awk -v a="$ended" -v b="$stopped" 'BEGIN {printf "%.2f", a - b}')"
    lab_result probe_seconds "$(awk -v a="$ended" -v b="$start" 'BEGIN {printf "%.2f", a - b}')"
    cat loss.json
    ;;
esac
