# Our prober as a client of stock ib_write_bw servers (probe --perftest), and the benchmark
# against perftest's own client on the same link, in one run. node2 starts a fresh stock server
# for every client (a server serves one client and exits); each round node1 runs, in turn:
#   the stock ib_write_bw client;
#   our probe --perftest --busy-poll, which waits as perftest does (polling the CQ): the
#   like-for-like comparison, whose ratio ours/stock is the calibration figure;
#   our probe --perftest as the exporter runs it (CPU-frugal waits);
# and records the bandwidths, the ratio, and the server's own report of our busy-poll burst;
# then one incompatible server (-s 4096, smaller than our 64 KiB WRITEs) must give a clear error
# fast. Last, the exporter (`run`) on node1 probes node2 as a `mode: perftest` peer on its
# schedule, while node2 restarts a stock server after each probe, as an operator's loop would.
bin=rdma-probe-exporter
N=${PERFTEST_MESSAGES:-500}
# One round in scripts/test (the check that it measures what it says); scripts/bench and
# scripts/bench-perftest pass their own, for the median.
ROUNDS=${PERFTEST_ROUNDS:-1}
# QP timeout 17 (~0.5 s) on both tools: 14 retransmits spuriously under full emulation
# (lab/README.md).
QP_TIMEOUT=17
case $LAB_NODE in
  node2)
    round=0
    while :; do
      round=$((round + 1))
      lab_wait_signal node1 "want-server-$round" 900 || exit 1
      [ -e "$LAB_RUN/nodes/node1/signal-interop-done" ] && break
      args=$(cat "$LAB_RUN/nodes/node1/server-args-$round")
      # Bounded: a client that never finishes must not hang the lab.
      timeout 120 ib_write_bw -d rxe0 -x 1 -F -u "$QP_TIMEOUT" $args >"server-$round.txt" 2>&1 &
      pid=$!
      lab_wait_listening 18515 || exit 1
      lab_signal "server-up-$round"
      wait $pid
      echo $? >"server-$round.rc"
      lab_signal "server-done-$round"
    done
    # The exporter phase: a stock server again and again until node1 is done (each serves one
    # probe and exits); every exit status is kept.
    : >loop-rc.txt
    n=0
    while [ ! -e "$LAB_RUN/nodes/node1/signal-exporter-done" ]; do
      n=$((n + 1))
      timeout 60 ib_write_bw -d rxe0 -x 1 -F -u "$QP_TIMEOUT" >"loop-$n.txt" 2>&1 &
      pid=$!
      # The server left waiting when node1 is done is stopped (its status is not a probe's).
      while kill -0 $pid 2>/dev/null; do
        [ -e "$LAB_RUN/nodes/node1/signal-exporter-done" ] && { kill $pid; break; }
        lab_nap 0.2
      done
      wait $pid
      echo "$n $?" >>loop-rc.txt
    done
    ;;
  node1)
    peer=$(lab_addr node2)
    round=0
    # server ARGS...: asks node2 for a fresh stock server with ARGS and waits until it listens.
    server() {
      round=$((round + 1))
      echo "$*" >"server-args-$round"
      lab_signal "want-server-$round"
      lab_wait_signal node2 "server-up-$round" 60
    }
    # server_result: waits for the server to exit; sets SRV_RC and SRV_OUT.
    server_result() {
      lab_wait_signal node2 "server-done-$round" 180 || return 1
      SRV_RC=$(cat "$LAB_RUN/nodes/node2/server-$round.rc")
      SRV_OUT="$LAB_RUN/nodes/node2/server-$round.txt"
    }
    gbps_of_table() { awk '/#bytes/ {getline; print $4; exit}' "$1"; }
    failures=0
    ratios=""
    # ours TAG FLAGS...: our probe --perftest against a fresh server; sets RC, GBPS, OURS_SRV_RC and OURS_SRV_OUT.
    ours() {
      local tag=$1
      shift
      server -n "$N" --report_gbits || exit 1
      $bin probe --perftest "$peer" --device rxe0 --gid-index 1 --messages "$N" \
        --qp-timeout "$QP_TIMEOUT" --perftest-report-gbits --json "$@" >"$tag.json" 2>"$tag.err"
      RC=$?
      server_result || exit 1
      OURS_SRV_RC=$SRV_RC OURS_SRV_OUT=$SRV_OUT
      GBPS=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.6f" % ((d.get("bandwidth_bytes_per_second") or 0) * 8e-9))' "$tag.json" 2>/dev/null || echo 0)
      [ "$RC" = 0 ] && [ "$SRV_RC" = 0 ] || { failures=$((failures + 1)); cat "$tag.err" "$tag.json" "$SRV_OUT"; }
    }
    # stock TAG: the stock client against a fresh server; sets STOCK.
    stock() {
      server -n "$N" --report_gbits || exit 1
      ib_write_bw -d rxe0 -x 1 -F -u "$QP_TIMEOUT" -n "$N" --report_gbits "$peer" >"$1.txt" 2>&1
      server_result || exit 1
      STOCK=$(gbps_of_table "$1.txt")
    }
    # One unrecorded run of each first: the first run in a fresh VM pays for loading the tools.
    stock stock-warmup
    ours ours-warmup --busy-poll
    for r in $(seq 1 "$ROUNDS"); do
      # The two compared runs in alternating order, so a drift in the host's load over a round
      # does not favour one side.
      if [ $((r % 2)) = 1 ]; then
        stock "stock-$r"
        ours "ours-$r" --busy-poll
      else
        ours "ours-$r" --busy-poll
        stock "stock-$r"
      fi
      stock=$STOCK
      rc=$RC ours=$GBPS srv_rc=$OURS_SRV_RC
      SRV_OUT=$OURS_SRV_OUT
      cp "$SRV_OUT" "server-of-ours-$r.txt"
      reported=$(gbps_of_table "server-of-ours-$r.txt")
      iters=$(awk '/#bytes/ {getline; print $2; exit}' "server-of-ours-$r.txt")
      ratio=$(awk -v a="$ours" -v b="${stock:-0}" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
      ratios="$ratios $ratio"
      ours "frugal-$r"
      frugal=$GBPS
      echo "round $r: stock client $stock Gb/s | ours (busy-poll) $ours Gb/s | ratio ours/stock $ratio | server's report of our burst: $reported Gb/s, $iters iterations | ours (CPU-frugal, as the exporter) $frugal Gb/s"
      lab_result "round_$r" "stock=$stock ours=$ours ratio=$ratio server_reported=$reported server_iters=$iters ours_rc=$rc server_rc=$srv_rc frugal=$frugal frugal_rc=$RC frugal_server_rc=$SRV_RC"
    done
    lab_result failures "$failures"
    median=$(printf '%s\n' $ratios | sort -n | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}')
    echo "median ratio ours (busy-poll) / stock over $ROUNDS rounds: $median"
    lab_result median_ratio "$median"
    echo "== an incompatible server: -s 4096 (its buffer is smaller than our 64 KiB WRITEs)"
    server -s 4096 -n "$N" --report_gbits || exit 1
    start=$SECONDS
    $bin probe --perftest "$peer" --device rxe0 --gid-index 1 --messages "$N" \
      --qp-timeout "$QP_TIMEOUT" --timeout 10s >incompatible.txt 2>&1
    rc=$?
    server_result || exit 1
    cat incompatible.txt
    echo "probe exit $rc after $((SECONDS - start)) s; server exit $SRV_RC"
    lab_result incompatible "rc=$rc seconds=$((SECONDS - start)) server_rc=$SRV_RC"
    lab_signal interop-done
    lab_signal "want-server-$((round + 1))"

    echo "== the exporter with node2 as a mode: perftest peer (a stock server loop on node2)"
    echo "bGFiLXBlcmZ0ZXN0LXBzay0wMTIzNDU2Nzg5YWJjZGVm" >/tmp/psk
    chmod 600 /tmp/psk
    cat >/tmp/perftest-exporter.yaml <<EOF
node: node1
auth: {psk_file: /tmp/psk}
devices:
  - {name: rxe0, port: 1, gid_index: 1}
schedule: {duty_cycle: 50%}
defaults:
  interval: 4s
  jitter: 10%
  message_size: 64KiB
  burst: {duration: 300ms}
  rate_limit: 20Mbps
  unpaced_every: 3
  qp_timeout: $QP_TIMEOUT
  timeout: 10s
peers:
  - {name: node2, address: $peer, mode: perftest}
EOF
    url=http://127.0.0.1:9587/metrics
    $bin run --config /tmp/perftest-exporter.yaml >exporter.log 2>&1 &
    exporter=$!
    ok='rdma_probe_runs_total{device="rxe0",peer="node2",peer_device="unknown",result="success"}'
    # Six successful probes, two of them unpaced (every third): about 30 s at a 4 s interval.
    if ! lab_wait_metric "$url" "$ok" 6 120; then
      tail -n 40 exporter.log
      kill $exporter
      lab_signal exporter-done
      exit 1
    fi
    lab_get "$url" >exporter-metrics.txt
    kill -TERM $exporter
    wait $exporter
    lab_result exporter_exit "$?"
    lab_signal exporter-done
    grep 'peer="node2"' exporter-metrics.txt | grep -v '^#' | head -n 40
    value() { awk -v s="$1" 'index($0, s " ") == 1 {print $2}' exporter-metrics.txt; }
    lab_result exporter_success "$(value "$ok")"
    lab_result exporter_failure "$(value "${ok/success/failure}")"
    lab_result exporter_bytes "$(value 'rdma_probe_bytes_total{device="rxe0",peer="node2",peer_device="unknown"}')"
    ;;
esac
exit 0
