# Two nodes: one exporter (node1) probes node2's responder fast enough to run 500 successful
# bursts, then 500 failed ones (node1's RoCE packets, UDP to 4791, are dropped while the control
# channel's TCP passes, so every session is set up and every burst ends in wc_retry_exceeded,
# and the session is rebuilt for the next), then recovers; then
# node1's link goes down (probes fail with port_down, never hang) and comes back. Before and
# after, the exporter's RDMA resources (rdma resource show: pd, cq, qp, mr, ctx), file
# descriptors, threads (counted idle, with no peers: at the start and after a reload at the end;
# the device's burst thread counted apart) and RSS are recorded on node1, and the responder's
# resources on node2.
bin=rdma-probe-exporter
echo "bGFiLWxlYWtzLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZA==" >/tmp/psk
chmod 600 /tmp/psk
url=http://127.0.0.1:9587/metrics
SUCCESSES=${LEAKS_SUCCESSES:-500}
FAILURES=${LEAKS_FAILURES:-500}

# resources: "pd=N cq=N qp=N mr=N ctx=N" of rxe0 (the whole node: only our process uses it).
resources() {
  rdma resource show | awk '$2 == "rxe0:" {
    for (i = 3; i < NF; i += 2) if ($i ~ /^(pd|cq|qp|mr|ctx)$/) out = out $i "=" $(i + 1) " "
    print out }' | sed 's/ $//'
}
# process PID THREADS: "fds=N threads=THREADS rss_kib=N", N fds the fewest of 20 counts 0.1 s
# apart: a probing exporter opens files for a moment (port facts and counters in sysfs, a
# session's connection as it is set up), so one count may catch one of those; a leaked fd is in
# every count.
process() {
  local fds fewest=
  for _ in $(seq 20); do
    fds=$(ls "/proc/$1/fd" | wc -l)
    [ -z "$fewest" ] || [ "$fds" -lt "$fewest" ] && fewest=$fds
    lab_nap 0.1
  done
  echo "fds=$fewest threads=$2 rss_kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status")"
}
threads() { awk '/^Threads:/ {print $2}' "/proc/$1/status"; }
# thread_names PID: the name of each of its threads, a line each, read in one pass (a count of
# all threads and a count of burst threads read apart would disagree on a thread started or
# ended between the two reads).
thread_names() { cat /proc/"$1"/task/*/comm 2>/dev/null; }
# burst_threads PID: its devices' burst threads (one a device, started when the device is
# opened and kept while it is configured).
burst_threads() { thread_names "$1" | grep -cx rdma-burst; }
# other_threads PID: its threads besides its burst threads, from one read.
other_threads() { thread_names "$1" | grep -cvx rdma-burst; }
# named_threads PID: how many threads of each name, "name=N,..." (the results say which thread
# a count gained or lost).
named_threads() { thread_names "$1" | sort | uniq -c | awk '{printf "%s%s=%s", sep, $2, $1; sep = ","}'; }
# idle_threads PID SECONDS [STOP_AT]: the fewest threads PID has besides its burst threads over
# SECONDS, sampled every half second (stopping early once at STOP_AT or fewer), while it has
# nothing to probe. Threads are counted idle because the runtime's blocking pool (bursts,
# counter reads, port reports) keeps a thread for every job that ever overlapped another for as
# long as jobs keep coming (its idle threads take turns), and lets one go only after 10 s
# without a job: a busy exporter's count is its history's peak overlap, not a leak. Idle, only
# the port report every 30 s starts a job, so the fewest over a window that holds 10 s without
# one is the runtime's own threads and whatever leaked.
idle_threads() {
  local fewest now t0=$SECONDS
  fewest=$(other_threads "$1")
  while [ $((SECONDS - t0)) -lt "$2" ] && { [ -z "${3:-}" ] || [ "$fewest" -gt "$3" ]; }; do
    lab_nap 0.5
    now=$(other_threads "$1")
    [ "$now" -lt "$fewest" ] && fewest=$now
  done
  echo "$fewest"
}

case $LAB_NODE in
  node2)
    $bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk \
      >responder.log 2>&1 &
    responder=$!
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    lab_signal responder-up
    lab_wait_signal node1 warm 300 || exit 1
    lab_result responder_baseline "$(resources)"
    lab_wait_signal node1 done 2400 || exit 1
    lab_result responder_end "$(resources)"
    lab_result responder_sessions_now "$(grep -c 'session set up' responder.log) set up, $(grep -c 'session ended' responder.log) ended"
    kill -TERM $responder
    wait $responder
    lab_result responder_exit "$?"
    ;;
  node1)
    lab_wait_signal node2 responder-up || exit 1
    # The exporter starts with no peers (its idle thread count), probes node2 after a reload,
    # and has no peers again at the end.
    node_config="node: node1
auth: {psk_file: /tmp/psk}
devices:
  - {name: rxe0, port: 1}"
    printf '%s\npeers: []\n' "$node_config" >/tmp/leaks-idle.yaml
    cat >/tmp/leaks-probing.yaml <<EOF
$node_config
schedule: {duty_cycle: 100%}
defaults:
  interval: 150ms
  jitter: 0%
  message_size: 4KiB
  burst: {messages: 8}
  unpaced_every: 0
  # 16.8 ms x 7 retries would fail a dropped burst in about 0.1 s, but Soft-RoCE on the lab's
  # kernel does not end it with a retry-exceeded completion when its packets are dropped at the
  # qdisc: the burst's timeout ends it (reason timeout). Short, so 500 failures take minutes.
  qp_timeout: 12
  timeout: 2s
peers:
  - {name: node2, address: $(lab_addr node2):18516}
EOF
    cp /tmp/leaks-idle.yaml /tmp/leaks.yaml
    $bin run --config /tmp/leaks.yaml >exporter.log 2>&1 &
    pid=$!
    lab_wait_listening 9587 || { cat exporter.log; exit 1; }
    # Its port is bound before its devices are opened: a first scrape answered means the
    # ping and burst threads are started, so the count below is not taken before them.
    curl -sS --max-time 60 -o /dev/null "$url" || { cat exporter.log; exit 1; }
    # The first port report runs at the start: its thread goes 10 s after it.
    idle_before=$(idle_threads $pid 20)
    lab_result idle_thread_names_at_baseline "$(named_threads $pid)"
    cp /tmp/leaks-probing.yaml /tmp/leaks.yaml
    kill -HUP $pid
    series() { echo "rdma_probe_runs_total{device=\"rxe0\",peer=\"node2\",peer_device=\"rxe0\",result=\"$1\"}"; }
    count() { lab_get "$url" | awk -v s="$(series "$1")" 'index($0, s " ") == 1 {print $2}'; }
    errors() { lab_get "$url" | awk -v r="reason=\"$1\"" 'index($0, "rdma_probe_errors_total{") == 1 && index($0, r) {s += $2} END {print s + 0}'; }
    fail() { echo "$1" >&2; tail -n 30 exporter.log >&2; kill $pid; lab_signal done; exit 1; }

    lab_wait_metric "$url" "$(series success)" 20 120 || fail "no warm session"
    lab_nap 1
    lab_result baseline "$(resources) $(process $pid "$idle_before")"
    lab_result threads_probing_at_baseline "$(threads $pid)"
    lab_signal warm
    t0=$SECONDS
    lab_wait_metric "$url" "$(series success)" "$SUCCESSES" 900 || fail "not $SUCCESSES successes"
    lab_result successes_seconds $((SECONDS - t0))

    lab_slow_roce_ports 0 0 loss 100% || fail "cannot drop RoCE packets"
    before=$(count failure); before=${before:-0}
    t0=$SECONDS
    lab_wait_metric "$url" "$(series failure)" $((before + FAILURES)) 1800 || fail "not $FAILURES failures"
    lab_result failures_seconds $((SECONDS - t0))
    lab_result failure_reasons "wc_retry_exceeded=$(errors wc_retry_exceeded) timeout=$(errors timeout) other=$(curl -sS "$url" | awk 'index($0, "rdma_probe_errors_total{") == 1 {s += $2} END {print s + 0}')"
    lab_result during_failures "$(resources) $(process $pid "$(threads $pid)")"
    lab_clear_faults
    ok=$(count success)
    lab_wait_metric "$url" "$(series success)" $((ok + 20)) 120 || fail "no recovery after the drop"

    # The port goes down: probes fail with port_down (no hang), and succeed again when it is up.
    lab_link_down
    t0=$SECONDS
    until [ "$(errors port_down)" -ge 1 ]; do
      [ $((SECONDS - t0)) -ge 30 ] && { lab_link_up; fail "no port_down within 30 s"; }
      lab_nap 0.2
    done
    lab_result port_down_seconds $((SECONDS - t0))
    lab_nap 3
    lab_result port_down_errors "$(errors port_down)"
    lab_link_up
    ok=$(count success)
    t0=$SECONDS
    lab_wait_metric "$url" "$(series success)" $((ok + 20)) 120 || fail "no recovery after link up"
    lab_result link_up_recovery_seconds $((SECONDS - t0))
    lab_nap 1
    # Counted now, with its threads counted idle below.
    end_resources="$(resources) $(process $pid @)"
    lab_result threads_probing_at_end "$(threads $pid)"
    lab_get "$url" >metrics.txt
    lab_result totals "success=$(count success) failure=$(count failure)"
    cp /tmp/leaks-idle.yaml /tmp/leaks.yaml
    kill -HUP $pid
    # The bursts' threads go 10 s after the last burst; a port report may keep one 10 s more.
    idle_after=$(idle_threads $pid 45 "$idle_before")
    lab_result idle_thread_names_at_end "$(named_threads $pid)"
    lab_result end "${end_resources/threads=@/threads=$idle_after} burst_threads=$(burst_threads $pid)"
    lab_signal done
    kill -TERM $pid
    wait $pid
    lab_result exit "$?"
    ;;
esac
exit 0
