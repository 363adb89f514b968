# The exporter's running cost (not run in CI: scripts/bench-exporter runs it, 10+ minutes).
# node1 runs the exporter with 10 paths: node2 and node3 each serve 5 control ports (their own
# exporter on 18516, four more responders on 18517..18520 on the same rxe0, rail 0 like the
# exporters'), and node1 lists each
# port as a peer. node2 and node3 run exporters too, probing node1 and each other, so node1's
# responder works as in a cluster. Over SOAK_SECONDS (default 600) node1 records:
#  - its process CPU (user + system) and the CPU of its burst thread (`rdma-burst`), so the CPU
#    spent outside bursts is the difference; RSS at the end;
#  - the bursts it ran (rdma_probe_runs_total) and what they moved;
#  - 200 scrapes of /metrics while the bursts run, timed by curl (time_total);
# then, with every exporter stopped, one stock ib_write_bw run of the same bytes and rate as one
# exporter burst, timed by /usr/bin/time, for the per-burst cost side by side.
bin=rdma-probe-exporter
url=http://127.0.0.1:9587
soak=${SOAK_SECONDS:-600}
(umask 077 && echo "bGFiLXNvYWstcHNrLTAxMjM0NTY3ODlhYmNkZWYtcGFkZGVk" >/tmp/psk)
# One burst: 500 ms at 20 Mb/s = 1.25 MB = 19 x 64 KiB. Every path every 30 s: 10 paths want
# 10 x 0.5 / 30 = 17% of the device; the budget allows 25%.
rate_mbps=20
burst_ms=500
config=/tmp/exporter.yaml
{
  cat <<EOF
node: \${NODE_NAME}
auth: {psk_file: /tmp/psk}
devices:
  - {name: rxe0, port: 1, rail: 0}
schedule: {duty_cycle: 25%}
defaults:
  interval: 30s
  message_size: 64KiB
  burst: {duration: ${burst_ms}ms}
  rate_limit: ${rate_mbps}Mbps
  unpaced_every: 0
  qp_timeout: 17
  timeout: 10s
peers:
EOF
  if [ "$LAB_NODE" = node1 ]; then
    for n in node2 node3; do
      for port in 18516 18517 18518 18519 18520; do
        echo "  - {name: $n-$port, address: $(lab_addr "$n"):$port}"
      done
    done
  else
    for n in node1 node2 node3; do echo "  - {name: $n, address: $(lab_addr "$n"):18516}"; done
  fi
} >"$config"
NODE_NAME=$LAB_NODE $bin run --config "$config" >exporter.log 2>&1 &
exporter=$!
responders=()
if [ "$LAB_NODE" != node1 ]; then
  for port in 18517 18518 18519 18520; do
    $bin responder --listen "0.0.0.0:$port" --device rxe0:0 --psk-file /tmp/psk >"responder-$port.log" 2>&1 &
    responders+=($!)
  done
  for port in 18516 18517 18518 18519 18520; do lab_wait_listening "$port" || exit 1; done
fi
lab_barrier serving

cpu_of() { awk '{ print $14 + $15 }' "$1"; } # utime + stime, clock ticks
ticks=$(getconf CLK_TCK)
burst_thread() { grep -l '^rdma-burst$' /proc/"$exporter"/task/*/comm 2>/dev/null | head -n1 | xargs -r dirname; }
sum() { curl -sS --max-time 5 "$url/metrics" | awk -v f="$1{" 'index($0, f) == 1 { s += $2 } END { printf "%.0f\n", s }'; }

if [ "$LAB_NODE" = node1 ]; then
  # Every path succeeded once (all sessions set up), then measure.
  start=$SECONDS
  until [ "$(curl -sS --max-time 5 "$url/metrics" | grep -c '^rdma_probe_success{.*} 1$')" -ge 10 ]; do
    [ $((SECONDS - start)) -ge 300 ] && { echo "not every path came up" >&2; tail -n 40 exporter.log >&2; exit 1; }
    sleep 2
  done
  lab_result paths_up_seconds $((SECONDS - start))
  thread=$(burst_thread)
  [ -n "$thread" ] || { echo "no rdma-burst thread" >&2; exit 1; }
  cpu0=$(cpu_of /proc/$exporter/stat) burst0=$(cpu_of "$thread/stat") runs0=$(sum rdma_probe_runs_total)
  bytes0=$(sum rdma_probe_bytes_total) failures0=$(sum rdma_probe_errors_total) t0=$(date +%s.%N)
  # 200 scrapes spread over the soak.
  gap=$(awk -v s="$soak" 'BEGIN { printf "%.3f", s / 200 }')
  for _ in $(seq 200); do
    curl -sS -o /dev/null --max-time 10 -w '%{time_total}\n' "$url/metrics" >>scrape-seconds.txt
    sleep "$gap"
  done
  t1=$(date +%s.%N)
  cpu1=$(cpu_of /proc/$exporter/stat) burst1=$(cpu_of "$thread/stat") runs1=$(sum rdma_probe_runs_total)
  bytes1=$(sum rdma_probe_bytes_total) failures1=$(sum rdma_probe_errors_total)
  curl -sS --max-time 5 "$url/metrics" >metrics-end.txt
  lab_result wall_seconds "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
  lab_result cpu_seconds "$(awk -v a="$cpu0" -v b="$cpu1" -v t="$ticks" 'BEGIN { printf "%.2f", (b - a) / t }')"
  lab_result burst_thread_cpu_seconds "$(awk -v a="$burst0" -v b="$burst1" -v t="$ticks" 'BEGIN { printf "%.2f", (b - a) / t }')"
  lab_result bursts $((runs1 - runs0))
  lab_result failures $((failures1 - failures0))
  lab_result bytes $((bytes1 - bytes0))
  lab_result rss_kib "$(awk '/^VmRSS/ { print $2 }' /proc/$exporter/status)"
  lab_result hwm_kib "$(awk '/^VmHWM/ { print $2 }' /proc/$exporter/status)"
  lab_result threads "$(ls /proc/$exporter/task | wc -l)"
  lab_signal soak-done
else
  lab_wait_signal node1 soak-done $((soak + 600)) || exit 1
fi
kill -TERM "$exporter" "${responders[@]}"
wait "$exporter" "${responders[@]}"
lab_barrier exporters-stopped

# One ib_write_bw run of one exporter burst's bytes at the same rate, node1 -> node2.
messages=$(lab_messages_for "$rate_mbps" "$(awk -v m="$burst_ms" 'BEGIN { print m / 1000 }')")
case $LAB_NODE in
  node2)
    ib_write_bw -d rxe0 -x 1 -F -s 65536 -n "$messages" >perftest-server.txt 2>&1 &
    lab_wait_listening 18515 || exit 1
    lab_signal perftest-up
    wait $!
    ;;
  node1)
    lab_wait_signal node2 perftest-up || exit 1
    /usr/bin/time -f '%U %S %e' -o perftest-time.txt ib_write_bw -d rxe0 -x 1 -F -s 65536 \
      -n "$messages" --rate_limit="$(awk -v m="$rate_mbps" 'BEGIN { print m / 1000 }')" --rate_units=g \
      --rate_limit_type=SW --burst_size=1 --report_gbits \
      "$(lab_addr node2)" >perftest-client.txt 2>&1
    lab_result perftest_messages "$messages"
    # (no process substitution: the guest's /dev has no /dev/fd)
    read -r user sys wall <<<"$(tail -n1 perftest-time.txt)"
    lab_result perftest_cpu_seconds "$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')"
    lab_result perftest_wall_seconds "$wall"
    ;;
esac
exit 0
