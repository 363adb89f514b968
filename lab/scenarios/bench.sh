# Benchmark (prints figures; asserts nothing about speed): on one lab link, in one run,
#  1. bandwidth: stock ib_write_bw -n N vs our probe --messages N, alternating, BENCH_ROUNDS
#     rounds (default 2; scripts/bench: 4);
#  2. pacing: our probe at several limits (achieved / limit);
#  3. warm session: time from burst request to first WRITE on a reused session;
#  4. CPU: our probe vs ib_write_bw's software limiter (--burst_size=1, or it silently does not
#     limit at low rates: lab/README.md, "Measured here, relied on elsewhere") at 25% and 50% of the link's measured bandwidth, same bytes,
#     with the CPU each spends in Soft-RoCE's doorbell writes (NIC emulation) measured alike;
#  5. the exporter's own cost, one exporter on node1 probing 10 paths (node2's responders on
#     ports 18516..18525; 500 ms bursts at 20 Mb/s or a quarter of the link): scrape latency of BENCH_SCRAPES (default 50;
#     scripts/bench: 200) scrapes with no burst
#     running, then as many while bursts run back to back, same exporter; then its CPU per
#     thread (burst thread, runtime workers, blocking pool) over BENCH_IDLE_SECONDS (default 10,
#     30 at least for the idle window; scripts/bench: 120, or 600 with --long) of its normal schedule (every path every 30 s), the
#     NIC emulation's doorbell share taken out of the burst thread as in 4; RSS.
# node2 serves (our responders, and a fresh ib_write_bw server per perftest run); node1 measures.
bin=rdma-probe-exporter
# The defaults are the short run of scripts/test; scripts/bench passes its own.
N=${BENCH_MESSAGES:-250}
ROUNDS=${BENCH_ROUNDS:-2}
SCRAPES=${BENCH_SCRAPES:-50}
IDLE_SECONDS=${BENCH_IDLE_SECONDS:-10}
(umask 077 && echo "bGFiLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZC1wYWRkZWQ=" >/tmp/psk)
TIMEFORMAT='%U %S'
# Both tools: QP timeout 17 (~0.5 s, ib_write_bw -u) instead of 14 (67 ms), which under full
# emulation retransmits spuriously (lab/README.md; lab/scenarios/probe-basic.sh).
QP_TIMEOUT=17
case $LAB_NODE in
  node2)
    $bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk >responder.log 2>&1 &
    responder=$!
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    # Nine more for the exporter's 10 paths in 5 (idle until then).
    extra=()
    for port in $(seq 18517 18525); do
      $bin responder --listen "0.0.0.0:$port" --device rxe0 --psk-file /tmp/psk >"responder-$port.log" 2>&1 &
      extra+=($!)
    done
    for port in $(seq 18517 18525); do lab_wait_listening "$port" || exit 1; done
    lab_signal responder-up
    round=0
    while :; do
      round=$((round + 1))
      lab_wait_signal node1 "want-perftest-$round" 900 || exit 1
      [ -e "$LAB_RUN/nodes/node1/signal-bench-done" ] && break
      args=$(cat "$LAB_RUN/nodes/node1/perftest-args-$round")
      # Bounded: a client that never connects (a broken run) must not hang the lab.
      timeout 300 ib_write_bw -d rxe0 -x 1 -F -u "$QP_TIMEOUT" $args >perftest-server-$round.txt 2>&1 &
      pid=$!
      lab_wait_listening 18515 || exit 1
      lab_signal "perftest-up-$round"
      wait $pid
    done
    kill -TERM $responder; wait $responder
    lab_result responder_exit "$?"
    kill -TERM "${extra[@]}"
    failed=0
    for pid in "${extra[@]}"; do wait "$pid" || failed=$((failed + 1)); done
    lab_result extra_responders_failed "$failed"
    ;;
  node1)
    lab_wait_signal node2 responder-up || exit 1
    peer=$(lab_addr node2)
    round=0
    # measure OUT ERR CMD...: runs CMD with stdout to OUT, stderr to ERR, and its CPU time
    # (user sys, bash's time) to OUT.cpu. The doorbell shim (lab/tools/doorbell-cpu.c) writes
    # "cpu_seconds count" of the command's write(2) calls on the uverbs device to OUT.nic:
    # Soft-RoCE's ibv_post_send rings its doorbell with one such write and does the emulated
    # NIC's send work inside it, on the posting thread's CPU clock.
    measure() {
      local out=$1 err=$2; shift 2
      rm -f "$out.nic"
      { time env LD_PRELOAD="$LAB_DOORBELL_SO" DOORBELL_CPU_OUT="$PWD/$out.nic" "$@" >"$out" 2>"$err"; } 2>"$out.cpu"
      [ -s "$out.nic" ] || echo "0 0" >"$out.nic"
    }
    # perftest ARGS...: runs an ib_write_bw client against a fresh server with the same ARGS;
    # sets RESULT to "bw_gbps cpu_user cpu_sys". (Not run in a $(...) subshell: it counts rounds.)
    # A run that reports no bandwidth (under emulation ib_write_bw has printed 0.000000 for a
    # whole run) is run once more, like ours below; every failed try is recorded
    # (perftest-failed-tries), and a second zero stays in the result for the test to refuse.
    perftest() {
      local out bw try
      for try in 1 2; do
        round=$((round + 1))
        echo "$*" >"perftest-args-$round"
        lab_signal "want-perftest-$round"
        lab_wait_signal node2 "perftest-up-$round" || return 1
        out="perftest-client-$round.txt"
        measure "$out" "$out" ib_write_bw -d rxe0 -x 1 -F -u "$QP_TIMEOUT" "$@" "$peer"
        bw=$(awk '/#bytes/ {getline; print $4}' "$out")
        awk -v b="${bw:-0}" 'BEGIN { exit !(b + 0 > 0) }' && break
        echo "ib_write_bw $* (round $round) try $try: no bandwidth: $(tail -n 2 "$out" | tr '\n' ' ')" >>perftest-failed-tries
      done
      RESULT="${bw:-0} $(cat "$out.cpu")"
      LAST=$out
    }
    # ours NAME ARGS...: one probe; sets RESULT to "bw_gbps cpu_user cpu_sys", keeps NAME.json.
    # A probe that fails (Soft-RoCE under emulation has stalled a burst after retransmits: no
    # completion and no error) is run once more, like ib_write_bw after a failed calibration;
    # every failed try is recorded (ours-failed-tries) and reported, and a second failure stays.
    ours() {
      local name=$1; shift
      local try
      for try in 1 2; do
        measure "$name.json" "$name.err" $bin probe "$peer:18516" --device rxe0 --psk-file /tmp/psk \
          --json --qp-timeout "$QP_TIMEOUT" "$@"
        grep -q '"error":null' "$name.json" && break
        echo "$name try $try: $(cat "$name.err")" >>ours-failed-tries
      done
      local bw
      bw=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.6f" % (d.get("bandwidth_bytes_per_second", 0) * 8e-9))' "$name.json" 2>/dev/null || echo 0)
      RESULT="$bw $(cat "$name.json.cpu")"
      LAST=$name.json
    }
    echo "== 1. bandwidth, $N x 64 KiB, unpaced, $ROUNDS rounds"
    for r in $(seq "$ROUNDS"); do
      perftest -n "$N" --report_gbits; set -- $RESULT; pbw=$1
      ours "unpaced-$r" --messages "$N"; set -- $RESULT; obw=$1
      ratio=$(awk -v a="$obw" -v b="$pbw" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
      echo "round $r: ib_write_bw $pbw Gb/s, ours $obw Gb/s, ratio $ratio"
      lab_result "bw_round_$r" "perftest=$pbw ours=$obw ratio=$ratio"
      seen="${seen:-} $pbw"
    done
    # What the link does: the median of ib_write_bw's rounds. Not the best round: under
    # emulation perftest's clock calibration sometimes inflates one round (0.12 Gb/s printed
    # among 0.07-0.09), which would put "50%" well above half of the real link.
    link=$(echo $seen | tr ' ' '\n' | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}')
    echo "link (median of ib_write_bw rounds): $link Gb/s"
    lab_result link_gbps "$link"
    echo "== 2. pacing (ours), burst >= 3 s"
    # At 10%, 25% and 50% of the link just measured (fixed limits would be most of a slow
    # machine's link, where the link and not the pacer sets the rate).
    for pct in 10 25 50; do
      limit=$(awk -v l="$link" -v p="$pct" 'BEGIN {m = l * 1000 * p / 100; printf "%.1f", (m < 1 ? 1 : m)}')
      msgs=$(awk -v m="$limit" 'BEGIN {n = int(m * 1e6 / 8 / 65536 * 4); print (n < 10 ? 10 : n)}')
      ours "paced-$pct" --messages "$msgs" --rate-limit "${limit}Mbps"; set -- $RESULT
      err=$(awk -v a="$1" -v l="$limit" 'BEGIN {printf "%+.3f", (a * 1000 / l - 1) * 100}')
      echo "limit $limit Mbps ($pct% of the link): achieved $(awk -v a="$1" 'BEGIN {printf "%.3f", a * 1000}') Mbps, error $err%"
      lab_result "pacing_$pct" "limit_mbps=$limit achieved_gbps=$1 error_pct=$err"
    done
    echo "== 3. warm session: request -> first WRITE (control round trip included)"
    rtt=$(ping -c 5 -i 0.2 -q "$peer" | awk -F/ '/^rtt/ {print $5}')
    echo "lab network ping RTT (avg): ${rtt} ms"
    lab_result rtt_ms "$rtt"
    ours warm --messages 20 --bursts 5
    lab_result warm "$(python3 -c '
import json,sys
lines=[json.loads(l) for l in open("warm.json") if l.strip()]
print(" ".join("%.3fms" % (l["burst_start_seconds"]*1e3) for l in lines if l.get("burst_start_seconds") is not None))')"
    echo "warm-session burst start times: $(grep '^warm=' results | cut -d= -f2)"
    echo "== 4. CPU at the same software rate limit, same bytes ($N messages)"
    # Both tools run as one-shot processes (start-up included) with the doorbell shim, which
    # measures the CPU each spends in Soft-RoCE's doorbell writes: the emulated NIC's work, which a
    # hardware NIC does off the host CPU, taken out of both sides for the second ratio. The
    # exporter pays start-up and session set-up once, so our per-burst process CPU
    # (process_cpu_seconds; every doorbell falls inside the burst) is printed too.
    for pct in 25 50; do
      gbps=$(awk -v l="$link" -v p="$pct" 'BEGIN {printf "%.4f", l * p / 100}')
      mbps=$(awk -v g="$gbps" 'BEGIN {printf "%.1f", g * 1000}')
      perftest -n "$N" --report_gbits --rate_limit="$gbps" --rate_units=g --rate_limit_type=SW --burst_size=1
      set -- $RESULT; pbw=$1 pu=$2 ps=$3; set -- $(cat "$LAST.nic"); pnic=$1 pdb=$2
      ours "cpu-$pct" --messages "$N" --rate-limit "${mbps}Mbps"
      set -- $RESULT; obw=$1 ou=$2 os=$3; set -- $(cat "$LAST.nic"); onic=$1 odb=$2
      set -- $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join("%.3f" % (d.get(k) or 0) for k in ("post_seconds", "cpu_seconds", "process_cpu_seconds")))' "cpu-$pct.json")
      line=$(awk -v g="$gbps" -v pb="$pbw" -v pu="$pu" -v ps="$ps" -v pn="$pnic" -v pd="$pdb" \
        -v ob="$obw" -v ou="$ou" -v os="$os" -v on="$onic" -v od="$odb" \
        -v post="$1" -v bt="$2" -v burst="$3" 'BEGIN {
        pc = pu + ps; oc = ou + os
        printf "limit %.4f Gb/s: ib_write_bw %.4f Gb/s (err %+.2f%%) cpu %.2f s, %.2f s of it in %d doorbells", g, pb, (pb / g - 1) * 100, pc, pn, pd
        printf " | ours %.4f Gb/s (err %+.2f%%) cpu %.2f s, %.2f s of it in %d doorbells (burst thread %.2f s; %.2f s wall inside ibv_post_send)", ob, (ob / g - 1) * 100, oc, on, od, bt, post
        printf " | cpu ratio ours/perftest %.3f; without the doorbells %.3f", (pc > 0 ? oc / pc : 0), (pc > pn ? (oc - on) / (pc - pn) : 0)
        printf " | ours per burst on a running exporter: cpu %.2f s, %.2f s without the doorbells, ratio to a perftest run without its doorbells %.3f",
          burst, burst - on, (pc > pn ? (burst - on) / (pc - pn) : 0) }')
      echo "$pct%: $line"
      lab_result "cpu_$pct" "$line"
    done
    echo "== 5. the exporter's own cost: 10 paths; scrapes idle and during bursts; CPU per thread"
    url=http://127.0.0.1:9587
    # exporter_config INTERVAL DUTY: node1's config, one path to each of node2's 10 responders.
    # Bursts of 500 ms at 20 Mb/s (19 x 64 KiB), as docs/deploy.md's sizing measured, or at a
    # quarter of the link measured in 1 where that is less (a loaded machine's emulated link can
    # be 20 Mb/s). Written whole then renamed: the exporter reloads on a change of the content.
    rate=$(awk -v l="$link" 'BEGIN { m = l * 1000 / 4; m = (m > 20 ? 20 : m); printf "%.1f", (m < 1 ? 1 : m) }')
    lab_result cost_rate_mbps "$rate"
    exporter_config() {
      {
        cat <<EOF
node: node1
auth: {psk_file: /tmp/psk}
devices:
  - {name: rxe0, port: 1}
schedule: {duty_cycle: $2}
defaults:
  interval: $1
  message_size: 64KiB
  burst: {duration: 500ms}
  rate_limit: ${rate}Mbps
  unpaced_every: 0
  qp_timeout: $QP_TIMEOUT
  timeout: 10s
peers:
EOF
        for port in $(seq 18516 18525); do echo "  - {name: node2-$port, address: $peer:$port}"; done
      } >exporter.yaml.new && mv exporter.yaml.new exporter.yaml
    }
    # runs: every burst the exporter ran so far (every result).
    runs() { lab_get "$url/metrics" | awk 'index($0, "rdma_probe_runs_total{") == 1 { s += $2 } END { printf "%.0f\n", s }'; }
    # scrapes FILE: SCRAPES scrapes of /metrics 50 ms apart, each on a new connection (as curl
    # would), each one's time from connect to the last byte a line of FILE. One process for all
    # of them: starting a process costs the emulated guest more than a scrape.
    scrapes() {
      python3 - "$SCRAPES" "$1" <<'PY'
import http.client, sys, time
n, out = int(sys.argv[1]), sys.argv[2]
with open(out, "a") as f:
    for _ in range(n):
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", 9587, timeout=10)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read()
        took = time.perf_counter() - start
        conn.close()
        if not body:
            sys.exit("an empty scrape")
        f.write(f"{took:.6f}\n")
        time.sleep(0.05)
PY
    }
    # settled: true once no burst ran for 8 s.
    settled() {
      local before
      before=$(runs); lab_nap 8; [ "$(runs)" = "$before" ]
    }
    # A fresh exporter with the doorbell shim (4): every path every 5 s, bursts back to back.
    exporter_config 5s 100%
    LD_PRELOAD="$LAB_DOORBELL_SO" DOORBELL_CPU_OUT="$PWD/exporter.nic" \
      NODE_NAME=node1 $bin run --config exporter.yaml >exporter.log 2>&1 &
    exporter=$!
    lab_wait_listening 9587 || { cat exporter.log; exit 1; }
    all_up() { [ "$(lab_get "$url/metrics" | grep -c '^rdma_probe_success{.*} 1$')" -ge 10 ]; }
    lab_wait_for "every path succeeded once" 300 all_up || exit 1
    lab_result cost_paths "$(lab_get "$url/metrics" | grep -c '^rdma_probe_success{')"
    # Idle: every path's interval to 1 h; each runs the probe it was already due for, then none.
    exporter_config 1h 100%
    lab_wait_for "no burst for 8 s after the interval went to 1 h" 120 settled || exit 1
    # snapshot FILE: the exporter's CPU at one moment, "tid comm ticks" a thread (utime + stime;
    # a thread that ends while it is read is left out), "0 process ticks" for the whole process
    # (ended threads included), "-1 wall SECONDS". One process reads it all, at once.
    snapshot() {
      python3 - "$exporter" >"$1" <<'PY'
import os, sys, time
pid = sys.argv[1]
def ticks(path):
    f = open(path).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
print(f"-1 wall {time.time():.3f}")
print(f"0 process {ticks(f'/proc/{pid}/stat')}")
for tid in os.listdir(f"/proc/{pid}/task"):
    try:
        comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        print(f"{tid} {comm} {ticks(f'/proc/{pid}/task/{tid}/stat')}")
    except (OSError, IndexError, ValueError):
        pass
PY
    }
    # cpu_window NAME SECONDS: the exporter's CPU over SECONDS, per thread, as NAME_threads (s):
    # the burst thread, the runtime's workers (its first threads: the runtime starts min(CPUs, 4)
    # before anything else runs), the blocking pool (the runtime's later threads) with the
    # threads that ended in the window (the process total less every thread alive at both ends),
    # the main thread, anything else; and NAME_wall_seconds, NAME_bursts (counted by scrapes
    # outside the window, so that their rendering is not in it).
    cpu_window() {
      local name=$1 seconds=$2 runs0 runs1 workers
      runs0=$(runs)
      snapshot "cpu-$name-start.txt"
      lab_nap "$seconds"
      snapshot "cpu-$name-end.txt"
      runs1=$(runs)
      lab_result "${name}_bursts" $((runs1 - runs0))
      workers=$(nproc); [ "$workers" -gt 4 ] && workers=4
      python3 - "$exporter" "$workers" "$(getconf CLK_TCK)" "cpu-$name-start.txt" "cpu-$name-end.txt" "$name" >>"$LAB_DIR/results" <<'PY'
import sys
pid, workers, hz, name = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[6]
def read(path):
    rows = {}
    for line in open(path):
        tid, rest = line.split(" ", 1)
        comm, value = rest.rsplit(" ", 1)
        rows[int(tid)] = (comm, float(value))
    return rows
start, end = read(sys.argv[4]), read(sys.argv[5])
first = set(sorted(t for t, (c, _) in start.items() if t > 0 and c.startswith("rdma-probe-asy"))[:workers])
cls = {"burst": 0, "workers": 0, "blocking": 0, "main": 0, "other": 0}
alive = 0
for t, (comm, ticks) in end.items():
    if t <= 0 or t not in start:
        continue
    d = ticks - start[t][1]
    alive += d
    if comm == "rdma-burst":
        cls["burst"] += d
    elif t == pid:
        cls["main"] += d
    elif t in first:
        cls["workers"] += d
    elif comm.startswith("rdma-probe-asy"):
        cls["blocking"] += d
    else:
        cls["other"] += d
total = end[0][1] - start[0][1]
cls["blocking"] += total - alive
print(f"{name}_wall_seconds={end[-1][1] - start[-1][1]:.1f}")
print(f"{name}_threads=" + " ".join(f"{k}={v / hz:.2f}" for k, v in cls.items()) + f" total={total / hz:.2f}")
PY
    }
    # Quiet: no burst due (every interval 1 h), nothing scraping: what the exporter costs doing
    # nothing but keeping its 10 paths (timers, sysfs port facts, readiness).
    cpu_window quiet "$IDLE_SECONDS"
    before=$(runs)
    scrapes scrape-idle.txt
    lab_result scrape_idle_bursts $(($(runs) - before))
    # During bursts: every path every 5 s again (a shorter interval pulls the next probe in).
    exporter_config 5s 100%
    again() { [ $(($(runs) - before)) -ge 2 ]; }
    lab_wait_for "bursts running again" 60 again || exit 1
    before=$(runs) t0=$(date +%s.%N)
    scrapes scrape-bursts.txt
    t1=$(date +%s.%N)
    # The device's busy share while these scrapes ran: bursts x 500 ms / wall time.
    bursts=$(($(runs) - before))
    lab_result scrape_bursts_bursts "$bursts"
    lab_result scrape_bursts_busy_share "$(awk -v n="$bursts" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", n * 0.5 / (b - a) }')"
    # Nearest-rank percentiles of each phase's scrape times.
    for phase in idle bursts; do
      lab_result "scrape_$phase" "$(python3 -c '
import math, sys
v = sorted(float(x) for x in open(sys.argv[1]).read().split())
p = lambda q: v[max(0, math.ceil(q * len(v)) - 1)] * 1e3
print("n=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f" % (len(v), p(0.5), p(0.99), v[-1] * 1e3))' "scrape-$phase.txt")"
    done
    # Idle cost: the normal schedule (every path every 30 s, 25% duty cycle at most) for
    # IDLE_SECONDS, 30 s at least, after the 5 s phase's due probes ran. Those run within a few
    # seconds of the reload (the quiet phase banked the gate's credit), each path's next one
    # 30 s ± 10% after its last: a window of one interval from 12 s on holds every path's, a
    # shorter one can fall between them.
    exporter_config 30s 25%
    lab_nap 12
    cpu_window idle "$((IDLE_SECONDS > 30 ? IDLE_SECONDS : 30))"
    lab_result idle_rss_kib "$(awk '/^VmRSS/ { print $2 }' /proc/$exporter/status)"
    lab_result idle_hwm_kib "$(awk '/^VmHWM/ { print $2 }' /proc/$exporter/status)"
    lab_result idle_life_bursts "$(runs)"
    lab_result idle_failures "$(lab_get "$url/metrics" | awk 'index($0, "rdma_probe_errors_total{") == 1 { s += $2 } END { printf "%.0f\n", s }')"
    kill -TERM "$exporter"; wait "$exporter"
    lab_result cost_exporter_exit "$?"
    lab_result idle_doorbells "$(cat exporter.nic 2>/dev/null || echo "0 0")"
    touch ours-failed-tries perftest-failed-tries
    lab_result ours_failed_tries "$(wc -l <ours-failed-tries)"
    lab_result perftest_failed_tries "$(wc -l <perftest-failed-tries)"
    lab_result ours_failures "$(grep -L '"error":null' ./*.json | wc -l)"
    lab_signal bench-done
    round=$((round + 1)); lab_signal "want-perftest-$round"
    ;;
esac
