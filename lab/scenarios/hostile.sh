# Two nodes: node2 runs the exporter (its responder, and its own schedule probing node1, which
# runs a responder); node1 attacks node2's control port with examples/hostile.rs: random bytes,
# oversized and truncated frames, stalled and slow handshakes, wrong keys, absurd session
# requests after a valid handshake, then 1,000 connections at once with handshake places kept
# busy by stalled connections meanwhile. A valid probe from node1 runs during the flood and
# right after it. node2 records its own process (descriptors, threads, RSS) before, every
# 0.25 s during and after the attack, its responder's sessions_total by result, and how many
# of its own probes succeeded during the attack. Last, 200 silent connections to node2's admin
# port. node1 records every attack's exit status in `exits` (those of the stalls during the flood
# in `stall-exits`), the test checks the list.
# Before those, node1 replays its own pings to node2, captured on its NIC (node2's counters
# read once settled, before and after): node2 answers each once and refuses the copies. Then
# node1 is a host on the fabric without the key: examples/ud_flood.rs sends 10,000 datagrams of
# 1,000 bytes (20 times a ping's) to node2's ping QP, whose number node2 reads from `rdma res
# show qp` (its exporter's one UD QP). node2 records its ping counters before and after the
# attacks, and how often its exporter logged its ping QP reset.
bin=rdma-probe-exporter
hostile=hostile
(umask 077 && echo "bGFiLWhvc3RpbGUtcHNrLTAxMjM0NTY3ODlhYmNkZWY=" >/tmp/psk)
url=http://127.0.0.1:9587/metrics

# process PID: "fds=N threads=N rss_kib=N".
# Sampled every 0.25 s during the attacks: bash alone (lab/guest/lib.sh, lab_nap).
process() {
  local fds=("/proc/$1/fd/"*) key value threads= rss=
  while read -r key value _; do
    case $key in Threads:) threads=$value ;; VmRSS:) rss=$value ;; esac
  done <"/proc/$1/status"
  echo "fds=${#fds[@]} threads=$threads rss_kib=$rss"
}
# sessions: the responder's sessions_total as "result=N ..." (all devices together).
sessions() {
  lab_get "$url" | awk 'index($0, "rdma_probe_responder_sessions_total{") == 1 {
      match($0, /result="[a-z_]+"/); r = substr($0, RSTART + 8, RLENGTH - 9); n[r] += $2 }
    END { for (r in n) printf "%s=%d ", r, n[r] }' | sed 's/ $//'
}
# pings: node2's ping counters as "refused=N sent=N lost=N" (the last two of its path to node1).
pings() {
  lab_get "$url" | awk '
    index($0, "rdma_probe_ping_refused_total{device=\"rxe0\"}") == 1 { r = $2 }
    index($0, "rdma_probe_ping_sent_total{") == 1 && index($0, "peer=\"node1\"") { s = $2 }
    index($0, "rdma_probe_ping_lost_total{") == 1 && index($0, "peer=\"node1\"") { l = $2 }
    END { printf "refused=%d sent=%d lost=%d", r, s, l }'
}
# ping_qpn PID: the number of the UD QP process PID made on rxe0 (its ping QP), or nothing.
ping_qpn() {
  rdma -j res show qp link rxe0/1 2>/dev/null | python3 -c 'import json, sys
qps = [q for q in json.load(sys.stdin) if q.get("type") == "UD" and q.get("pid") == int(sys.argv[1])]
print(qps[0]["lqpn"] if len(qps) == 1 else "")' "$1"
}
successes() {
  lab_get "$url" | awk 'index($0, "rdma_probe_runs_total{") == 1 && index($0, "peer=\"node1\"") && index($0, "result=\"success\"") {s += $2} END {print s + 0}'
}

case $LAB_NODE in
  node2)
    lab_wait_signal node1 responder-up 300 || exit 1
    cat >/tmp/exporter.yaml <<EOF
node: node2
auth: {psk_file: /tmp/psk}
listen: {metrics: 0.0.0.0:9587, control: 0.0.0.0:18516}
devices:
  - {name: rxe0, port: 1}
schedule: {duty_cycle: 20%}
defaults:
  interval: 2s
  jitter: 0%
  message_size: 16KiB
  burst: {duration: 100ms}
  rate_limit: 20Mbps
  unpaced_every: 0
  qp_timeout: 17
  # Also the responder's handshake deadline: a stalled connection holds a slot this long.
  timeout: 3s
peers:
  - {name: node1, address: $(lab_addr node1):18516}
EOF
    $bin run --config /tmp/exporter.yaml >exporter.log 2>&1 &
    pid=$!
    fail() { echo "$1" >&2; tail -n 30 exporter.log >&2; lab_signal ready; lab_signal done; exit 1; }
    lab_wait_metric "$url" "rdma_probe_runs_total{device=\"rxe0\",peer=\"node1\",peer_device=\"rxe0\",result=\"success\"}" 1 120 ||
      fail "node2's own schedule never succeeded"
    lab_nap 1
    lab_result baseline "$(process $pid)"
    lab_result sessions_before "$(sessions)"
    qpn=$(ping_qpn $pid)
    [ -n "$qpn" ] || { rdma res show qp >&2; fail "no ping QP of the exporter in rdma res show qp"; }
    echo "$qpn" >ping-qpn
    lab_result pings_before "$(pings)"
    lab_signal ready
    lab_wait_signal node1 attack-start 300 || fail "node1 never attacked"
    ok_start=$(successes)
    t0=$SECONDS
    while [ ! -e "$LAB_RUN/nodes/node1/signal-attack-done" ] && [ $((SECONDS - t0)) -lt 300 ]; do
      process $pid >>samples.txt
      lab_nap 0.25
    done
    ok_end=$(successes)
    lab_result own_schedule "success_during=$((ok_end - ok_start)) attack_seconds=$((SECONDS - t0))"
    lab_result peak "$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[2] > m[kv[1]]) m[kv[1]] = kv[2] } }
      END { printf "fds=%d threads=%d rss_kib=%d samples=%d", m["fds"], m["threads"], m["rss_kib"], NR }' samples.txt)"
    lab_nap 3
    lab_result after "$(process $pid)"
    lab_result sessions_after "$(sessions)"
    kill -0 $pid && lab_result alive yes
    ok_before_end=$(successes)
    lab_nap 4
    lab_result own_schedule_after "success_after=$(($(successes) - ok_before_end))"
    lab_result pings_after "$(pings)"
    lab_result ping_qp_resets "$(grep -c 'ping QP in the error state' exporter.log)"
    lab_get "$url" >metrics.txt
    lab_signal done
    kill -TERM $pid
    wait $pid
    lab_result exit "$?"
    grep -c "connection refused" exporter.log | sed 's/^/refusal log lines: /'
    ;;
  node1)
    $bin responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk >responder.log 2>&1 &
    responder=$!
    lab_wait_listening 18516 || { cat responder.log; exit 1; }
    lab_signal responder-up
    lab_wait_signal node2 ready 300 || exit 1
    target=$(lab_addr node2):18516
    # attack NAME ARGS...: one attack, its report appended to hostile.jsonl; "NAME exit=STATUS"
    # to $exits (default: exits).
    attack() {
      $hostile "$target" "$@" --psk-file /tmp/psk --wait 20 >>hostile.jsonl
      echo "$1 exit=$?" >>"${exits:-exits}"
    }
    probe() { $bin probe "$target" --device rxe0 --psk-file /tmp/psk --json --qp-timeout 17 --duration 200ms; }
    lab_signal attack-start
    t0=$SECONDS
    # A replayer: node1's own pings to node2 (`probe --ping`, whose key node2 holds), captured
    # as they leave this node's NIC and sent again byte for byte, 20 times each, a millisecond
    # apart (source, tag and ICRC all valid). node2 must answer each ping once and refuse the
    # copies; its counters are read over HTTP before and after.
    node2_pings() {
      lab_get "http://$(lab_addr node2):9587/metrics" | awk '
        index($0, "rdma_probe_ping_refused_total{device=\"rxe0\"}") == 1 { r = $2 }
        index($0, "rdma_probe_ping_answered_total{device=\"rxe0\"}") == 1 { a = $2 }
        END { printf "refused=%d answered=%d", r, a }'
    }
    # node2_settled: node2's counters once they stopped moving (its exporter reports its pings
    # every few seconds): the same twice 3 s apart.
    node2_settled() {
      local last now start=$SECONDS
      last=$(node2_pings)
      while lab_nap 3; now=$(node2_pings); [ "$now" != "$last" ] && [ $((SECONDS - start)) -lt 60 ]; do
        last=$now
      done
      echo "$now"
    }
    lab_result replay_before "$(node2_settled)"
    # It captures from when it says so (replay.ready) until told to stop (replay.stop).
    python3 - "$LAB_NIC" "$(lab_addr node2)" 20 >replay.json 2>replay.err <<'REPLAY' &
import json, os, socket, struct, sys, time
nic, to, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.bind((nic, 0))
s.settimeout(0.2)
open("replay.ready", "w").close()
frames, end = [], time.time() + 120
while time.time() < end and not os.path.exists("replay.stop"):
    try:
        frame, addr = s.recvfrom(65535)
    except socket.timeout:
        continue
    # Outgoing IPv4 to node2, UDP to 4791 (RoCE v2), BTH opcode UD SEND only (0x64), a 48-byte
    # payload (after the DETH, before the ICRC) whose kind byte says ping (1).
    if addr[2] != socket.PACKET_OUTGOING or frame[12:14] != b"\x08\x00":
        continue
    ip = 14 + (frame[14] & 0x0F) * 4
    if frame[23] != 17 or socket.inet_ntoa(frame[30:34]) != to:
        continue
    if struct.unpack("!H", frame[ip + 2:ip + 4])[0] != 4791 or frame[ip + 8] != 0x64:
        continue
    payload = frame[ip + 8 + 12 + 8:-4]
    if len(payload) == 48 and payload[5] == 1:
        frames.append(frame)
sent = 0
for frame in frames:
    for _ in range(copies):
        s.send(frame)
        sent += 1
        time.sleep(0.001)
print(json.dumps({"captured": len(frames), "sent": sent}))
REPLAY
    replayer=$!
    lab_wait_file replay.ready 60 || exit 1
    $bin probe "$target" --device rxe0 --psk-file /tmp/psk --qp-timeout 17 --duration 200ms \
      --ping 50 --ping-interval 20ms --json >replay-probe.json 2>replay-probe.err
    lab_result replay_probe_exit "$?"
    touch replay.stop
    wait $replayer
    lab_result replay_exit "$?"
    lab_result replay_after "$(node2_settled)"
    ud_flood --to "$(lab_addr node2)" --qpn "$(cat "$LAB_RUN/nodes/node2/ping-qpn")" \
      --size 1000 --count 10000 >ud-flood.json 2>ud-flood.err
    lab_result ud_flood_exit "$?"
    attack random --count 24
    attack oversize --count 24
    attack truncated --count 24
    attack stall --count 8
    attack slow --interval 0.5
    attack wrong-psk --count 24
    attack absurd
    # The flood, and stalled connections that keep every handshake place busy meanwhile.
    $hostile "$target" flood --count 1000 --hold 60 >>hostile.jsonl 2>flood.err &
    flood=$!
    (for i in 1 2 3 4; do exits=stall-exits attack stall --count 8; done) &
    stalls=$!
    until grep -q "connections made" flood.err; do
      kill -0 $flood 2>/dev/null || break
      lab_nap 0.1
    done
    cat flood.err
    # Once the responder has worked through the queued connections: the stalled ones still hold
    # every handshake place, and the flood's connections are still open on this side.
    lab_nap 1
    probe >probe-during.json
    lab_result probe_during_exit "$?"
    wait $flood
    echo "flood exit=$?" >>exits
    wait $stalls
    echo "stalls exit=$?" >>exits
    probe >probe-after.json
    lab_result probe_after_exit "$?"
    # The admin port: silent connections past its cap are closed at once.
    $hostile "$(lab_addr node2):9587" flood --count 200 --hold 5 >http-flood.jsonl 2>/dev/null
    echo "http-flood exit=$?" >>exits
    lab_result attack_seconds $((SECONDS - t0))
    lab_signal attack-done
    lab_wait_signal node2 done 300
    kill -TERM $responder
    wait $responder
    echo "responder exit=$?" >>exits
    ;;
esac
exit 0
