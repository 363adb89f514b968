# Two nodes: node1 runs a long paced burst against node2's responder and, mid-burst, node2 has
# node1 powered off. The responder must notice the dead prober (TCP keepalive on the silent
# control channel) and free the device's burst claim long before its 60 s idle timeout; then a
# probe from node2 to its own responder (Soft-RoCE loopback) must be served, not told busy.
bin=rdma-probe-exporter
(umask 077 && echo "bGFiLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZC1wYWRkZWQ=" >/tmp/psk)
case $LAB_NODE in
  node1)
    lab_wait_signal node2 responder-up || exit 1
    $bin probe "$(lab_addr node2):18516" --device rxe0 --psk-file /tmp/psk --json \
      --duration 120s --rate-limit 10Mbps >long.json 2>&1 &
    lab_signal probe-started
    wait # powered off long before the burst ends
    ;;
  node2)
    $bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk \
      --idle-timeout 60s --metrics-listen 127.0.0.1:9587 >responder.log 2>&1 &
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    lab_signal responder-up
    lab_wait_signal node1 probe-started 120 || exit 1
    # Mid-burst: node1's session is set up (seconds under emulation) and its WRITEs are arriving.
    lab_wait_for "node1's session" 60 grep -q "session set up" responder.log \
      || { echo "no session from node1"; cat responder.log; exit 1; }
    rcvd() { cat /sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts; }
    before=$(rcvd)
    arriving() { [ "$(rcvd)" -gt $((before + 100)) ]; }
    lab_wait_for "node1's burst" 60 arriving || exit 1
    stopped=$(date +%s.%N)
    lab_stop_node node1 || exit 1
    start=$SECONDS
    until grep -q "session ended" responder.log; do
      [ $((SECONDS - start)) -ge 90 ] && { echo "the session never ended"; cat responder.log; exit 1; }
      lab_nap 0.2
    done
    ended=$(date +%s.%N)
    lab_result session_ended_after_seconds "$(awk -v a="$ended" -v b="$stopped" 'BEGIN {printf "%.2f", a - b}')"
    grep "session ended" responder.log | head -1
    $bin probe 127.0.0.1:18516 --device rxe0 --psk-file /tmp/psk --json --messages 20 >after.json
    echo "after exit=$?" >>exits
    lab_get http://127.0.0.1:9587/metrics >responder-metrics.txt
    cat exits after.json
    kill -TERM %1; wait
    ;;
esac
