# Two nodes: what an always-on exporter needs from the engine and the responder, on real
# Soft-RoCE. node2 runs a responder with a short idle timeout (4 s); node1 probes it:
#  - low-rate: 4 KiB messages (CQ moderation 100) at 20 msg/s with --timeout 3s: the first
#    signaled WRITE is the 100th, 5 s in; only unsignaled WRITEs are outstanding before it,
#    which is not a stall (the burst must succeed);
#  - long: a paced burst of 8 s, longer than the responder's 4 s idle timeout (the responder
#    waits for the burst it agreed to);
#  - warm: 2 bursts 6 s apart on one warm session: the responder closes it as idle in between,
#    the prober rebuilds it (new_session), both succeed;
#  - verify: every message of a 200-message burst is checked at its own offset; with 1 MiB of
#    session memory, 64 KiB messages get 16 slots and the last 16 of 64 are checked;
#  - slow: the link slowed (netem rate) to a third of a paced burst's pace: the burst ends at its
#    deadline with the bandwidth it achieved next to `timeout`;
# then node2 takes its lab link down: /readyz goes 503 while the port is not ACTIVE, 200 again
# after link up.
bin=rdma-probe-exporter
(umask 077 && echo "bGFiLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZC1wYWRkZWQ=" >/tmp/psk)
case $LAB_NODE in
  node2)
    $bin --log-level debug responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk \
      --idle-timeout 4s --metrics-listen 0.0.0.0:9587 >responder.log 2>&1 &
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    lab_signal responder-up
    lab_wait_signal node1 probes-done 900 || exit 1
    readyz() { lab_http_code http://127.0.0.1:9587/readyz; }
    lab_result readyz_before "$(readyz)"
    lab_link_down
    lab_nap 8 # the port is re-read every 5 s
    lab_result readyz_link_down "$(readyz)"
    lab_result port_state_down "$(cat /sys/class/infiniband/rxe0/ports/1/state)"
    lab_link_up
    start=$SECONDS
    until [ "$(readyz)" = 200 ] || [ $((SECONDS - start)) -ge 60 ]; do lab_nap 1; done
    lab_result readyz_link_up "$(readyz)"
    lab_signal checks-done
    kill -TERM %1; wait %1
    ;;
  node1)
    lab_wait_signal node2 responder-up || exit 1
    peer=$(lab_addr node2):18516
    probe() { $bin probe "$peer" --device rxe0 --psk-file /tmp/psk --json --qp-timeout 17 "$@"; }
    probe --size 4KiB --rate-limit 20msg/s --messages 150 --timeout 3s >low-rate.json
    echo "low-rate exit=$?" >>exits
    probe --duration 8s --rate-limit 2Mbps >long.json; echo "long exit=$?" >>exits
    probe --messages 20 --bursts 2 --pause 6s >warm.json; echo "warm exit=$?" >>exits
    probe --messages 200 >verify-all.json; echo "verify-all exit=$?" >>exits
    probe --messages 64 --max-session-memory 1MiB >verify-window.json; echo "verify-window exit=$?" >>exits
    # A link at 2 Mb/s under a 6 Mb/s pace: 60 messages are planned as 5.2 s, the deadline is
    # 2 x 5.2 s + 2 s = 12.5 s, the link needs 15.7 s: the burst ends at its deadline with the
    # link's rate as its figure, next to `timeout`. netem delays (not drops) with a deep queue.
    lab_netem rate 2mbit limit 100000
    probe --messages 60 --rate-limit 6Mbps --timeout 2s >slow.json; echo "slow exit=$?" >>exits
    lab_clear_faults
    cat exits
    lab_signal probes-done
    lab_wait_signal node2 checks-done 300
    ;;
esac
