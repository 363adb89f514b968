# Benchmark (prints figures; asserts nothing about speed): on one lab link, in one run,
#  1. bandwidth: stock ib_write_bw -n N vs our probe --messages N, alternating, 3 rounds;
#  2. pacing: our probe at several limits (achieved / limit);
#  3. warm session: time from burst request to first WRITE on a reused session;
#  4. CPU: our probe vs ib_write_bw's software limiter (--burst_size=1, or it silently does not
#     limit at low rates: lab-notes.md) at 25% and 50% of the link's measured bandwidth, same bytes;
#     then both again under strace, to take Soft-RoCE's in-doorbell NIC emulation out of both.
# node2 serves (our responder, and a fresh ib_write_bw server per perftest run); node1 measures.
bin=rdma-probe-exporter
N=${BENCH_MESSAGES:-500}
echo "lab-psk-0123456789abcdef" >/tmp/psk
TIMEFORMAT='%U %S'
case $LAB_NODE in
  node2)
    $bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk >responder.log 2>&1 &
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    lab_signal responder-up
    round=0
    while :; do
      round=$((round + 1))
      lab_wait_signal node1 "want-perftest-$round" 900 || exit 1
      [ -e /mnt/nodes/node1/signal-bench-done ] && break
      args=$(cat /mnt/nodes/node1/perftest-args-$round)
      ib_write_bw -d rxe0 -x 1 -F $args >perftest-server-$round.txt 2>&1 &
      pid=$!
      lab_wait_listening 18515 || exit 1
      lab_signal "perftest-up-$round"
      wait $pid
    done
    kill -TERM %1; wait
    ;;
  node1)
    lab_wait_signal node2 responder-up || exit 1
    peer=$(lab_addr node2)
    round=0
    # measure OUT ERR CMD...: runs CMD with stdout to OUT, stderr to ERR, and its CPU time
    # (user sys, bash's time: the command and its children) to OUT.cpu. With TRACE=1 it runs
    # under strace, which records every write(2) on the uverbs device: Soft-RoCE's ibv_post_send
    # rings its doorbell with one such write and does the emulated NIC's send work inside it;
    # OUT.nic gets "seconds count" of those writes. Only writes stop the tracee (seccomp-bpf),
    # and -ff keeps each thread's calls whole in its own file.
    measure() {
      local out=$1 err=$2; shift 2
      if [ "${TRACE:-0}" = 1 ]; then
        rm -f "$out".trace.*
        strace -ff --seccomp-bpf -e trace=write -T -y -o "$out.trace" \
          bash -c 'TIMEFORMAT="%U %S"; out=$1 err=$2; shift 2; { time "$@" >"$out" 2>"$err"; } 2>"$out.cpu"' \
          measure "$out" "$err" "$@"
        cat "$out".trace.* | awk '/^write\([0-9]+<\/dev\/infiniband\/uverbs/ && match($0, /<[0-9.]+>$/) {
          s += substr($0, RSTART + 1, RLENGTH - 2); n++ } END { printf "%.3f %d\n", s, n }' >"$out.nic"
        rm -f "$out".trace.*
      else
        { time "$@" >"$out" 2>"$err"; } 2>"$out.cpu"
      fi
    }
    # perftest ARGS...: runs an ib_write_bw client against a fresh server with the same ARGS;
    # sets RESULT to "bw_gbps cpu_user cpu_sys". (Not run in a $(...) subshell: it counts rounds.)
    perftest() {
      round=$((round + 1))
      echo "$*" >"perftest-args-$round"
      lab_signal "want-perftest-$round"
      lab_wait_signal node2 "perftest-up-$round" || return 1
      local out="perftest-client-$round.txt"
      measure "$out" "$out" ib_write_bw -d rxe0 -x 1 -F "$@" "$peer"
      local bw
      bw=$(awk '/#bytes/ {getline; print $4}' "$out")
      RESULT="${bw:-0} $(cat "$out.cpu")"
      LAST=$out
    }
    # ours NAME ARGS...: one probe; sets RESULT to "bw_gbps cpu_user cpu_sys", keeps NAME.json.
    ours() {
      local name=$1; shift
      measure "$name.json" "$name.err" $bin probe "$peer:18516" --device rxe0 --psk-file /tmp/psk --json "$@"
      local bw
      bw=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.6f" % (d.get("bandwidth_bytes_per_second", 0) * 8e-9))' "$name.json" 2>/dev/null || echo 0)
      RESULT="$bw $(cat "$name.json.cpu")"
      LAST=$name.json
    }
    echo "== 1. bandwidth, $N x 64 KiB, unpaced"
    for r in 1 2 3 4; do
      perftest -n "$N" --report_gbits; set -- $RESULT; pbw=$1
      ours "unpaced-$r" --messages "$N"; set -- $RESULT; obw=$1
      ratio=$(awk -v a="$obw" -v b="$pbw" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')
      echo "round $r: ib_write_bw $pbw Gb/s, ours $obw Gb/s, ratio $ratio"
      lab_result "bw_round_$r" "perftest=$pbw ours=$obw ratio=$ratio"
      link=$(awk -v a="${link:-0}" -v b="$pbw" 'BEGIN {print (b > a ? b : a)}') # the best seen
    done
    echo "== 2. pacing (ours), burst >= 3 s"
    for limit in 10 20 40; do
      msgs=$(awk -v m="$limit" 'BEGIN {printf "%d", m * 1e6 / 8 / 65536 * 4}')
      ours "paced-$limit" --messages "$msgs" --rate-limit "${limit}Mbps"; set -- $RESULT
      err=$(awk -v a="$1" -v l="$limit" 'BEGIN {printf "%+.3f", (a * 1000 / l - 1) * 100}')
      echo "limit $limit Mbps: achieved $(awk -v a="$1" 'BEGIN {printf "%.3f", a * 1000}') Mbps, error $err%"
      lab_result "pacing_$limit" "achieved_gbps=$1 error_pct=$err"
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
    # Each tool runs twice per limit: plain (the CPU figures), then under strace to measure the
    # time each spends in Soft-RoCE's doorbell writes (the emulated NIC's work, which a hardware
    # NIC does off the host CPU), so that part can be taken out of both sides. Both are one-shot
    # processes, start-up included; the exporter pays those once, so our per-burst process CPU
    # (process_cpu_seconds) is printed too.
    cpu_of() { awk -v u="$1" -v s="$2" 'BEGIN {print u + s}'; }
    for pct in 25 50; do
      gbps=$(awk -v l="$link" -v p="$pct" 'BEGIN {printf "%.4f", l * p / 100}')
      mbps=$(awk -v g="$gbps" 'BEGIN {printf "%.1f", g * 1000}')
      pargs="-n $N --report_gbits --rate_limit=$gbps --rate_units=g --rate_limit_type=SW --burst_size=1"
      perftest $pargs; set -- $RESULT; pbw=$1; pcpu=$(cpu_of "$2" "$3")
      ours "cpu-$pct" --messages "$N" --rate-limit "${mbps}Mbps"
      set -- $RESULT; obw=$1; ocpu=$(cpu_of "$2" "$3")
      # "post_seconds cpu_seconds process_cpu_seconds" of a probe's JSON.
      figures() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join("%.3f" % (d.get(k) or 0) for k in ("post_seconds", "cpu_seconds", "process_cpu_seconds")))' "$1"; }
      post=$(figures "cpu-$pct.json")
      TRACE=1 perftest $pargs; set -- $RESULT; ptcpu=$(cpu_of "$2" "$3"); set -- $(cat "$LAST.nic"); pnic=$1 pdb=$2
      TRACE=1 ours "cpu-traced-$pct" --messages "$N" --rate-limit "${mbps}Mbps"
      set -- $RESULT; otcpu=$(cpu_of "$2" "$3"); set -- $(cat "$LAST.nic"); onic=$1 odb=$2
      set -- $(figures "cpu-traced-$pct.json"); otburst=$3
      set -- $post
      line=$(awk -v pb="$pbw" -v ob="$obw" -v pc="$pcpu" -v oc="$ocpu" -v g="$gbps" -v ps="$1" -v bt="$2" -v ob1="$3" -v otb="$otburst" \
        -v ptc="$ptcpu" -v pn="$pnic" -v pd="$pdb" -v otc="$otcpu" -v on="$onic" -v od="$odb" 'BEGIN {
        printf "limit %.4f Gb/s: ib_write_bw %.4f Gb/s (err %+.2f%%) cpu %.2f s | ours %.4f Gb/s (err %+.2f%%) cpu %.2f s (burst thread %.2f s, %.2f s inside ibv_post_send) | cpu ratio ours/perftest %.3f", g, pb, (pb / g - 1) * 100, pc, ob, (ob / g - 1) * 100, oc, bt, ps, (pc > 0 ? oc / pc : 0)
        printf " | under strace: ib_write_bw cpu %.2f s, %.2f s in %d doorbells; ours cpu %.2f s, %.2f s in %d doorbells; cpu ratio without the doorbells %.3f",
          ptc, pn, pd, otc, on, od, (ptc > pn ? (otc - on) / (ptc - pn) : 0)
        printf " | ours per burst on a running exporter (no process start, no session set-up): cpu %.2f s, %.2f s without the doorbells, ratio to ib_write_bw without its doorbells %.3f",
          ob1, otb - on, (ptc > pn ? (otb - on) / (ptc - pn) : 0) }')
      echo "$pct%: $line"
      lab_result "cpu_$pct" "$line"
    done
    lab_signal bench-done
    round=$((round + 1)); lab_signal "want-perftest-$round"
    ;;
esac
