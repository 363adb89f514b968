# The shipped alert rules, Alertmanager configuration and dashboards against a real Prometheus
# and Alertmanager (tests/lab/prometheus.rs). Every node runs the exporter with the lab's config
# (config/lab.yaml); node1 also runs Prometheus and Alertmanager (Debian's, from .cache/tools):
# Prometheus scrapes the three exporters with the rules generated for the config's probe interval
# (deploy/prometheus/generate --interval) and sends its alerts to Alertmanager, which runs
# deploy/alertmanager/alertmanager.yaml as shipped and delivers each notification to a webhook
# receiver that logs it (alert_receiver.py). In one boot:
#  1. clean: every path up, then CLEAN_SECONDS with no fault;
#  2. rate cap: a tbf of CAP on node2's lab NIC (what node2 sends: its own probes' data) until the
#     first notification after it, HOLD_INTERVALS more, then cleared until no alert fires;
#  3. dead port: node3 drops every RoCE packet it sends (UDP; the control channel and the scrapes
#     are TCP and go on), until the first notification, HOLD_INTERVALS more, then cleared;
#  4. node loss: node3 is powered off until the first notification, then HOLD_INTERVALS more plus
#     the longest `for:` of the alerts it must hold back;
#  Each fault starts HOLD_INTERVALS after the previous one has cleared (its late notifications
#  count against it; cap_cleared and port_cleared say when no alert fired any more).
#  5. node1 keeps what the test judges: the notifications, every firing alert sample of the run,
#     the rules' health, every dashboard query run over the whole run, what each path measured
#     (shown when a phase fails) and the phase times (its own clock, which is Prometheus's).
# Files (lab/run --file): lab.yaml, rules.yaml, alertmanager.yaml, prometheus and alertmanager
# (the servers), prometheus-lab.env (INTERVAL_SECONDS, CLEAN_SECONDS, CAP, HOLD_INTERVALS),
# dashboard-queries.json (deploy/lib/checks.py queries), prometheus_queries.py and
# alert_receiver.py.
bin=rdma-probe-exporter
files=/mnt/files
. "$files/prometheus-lab.env"
(umask 077 && echo "bGFiLXByb21ldGhldXMtcHNrLTAxMjM0NTY3ODlhYmNkZWY=" >/tmp/psk) # config/lab.yaml: auth: {psk_file: /tmp/psk}
prom=http://127.0.0.1:9090

NODE_NAME=$LAB_NODE $bin run --config "$files/lab.yaml" >exporter.log 2>&1 &
exporter=$!
ready() { lab_ok http://127.0.0.1:9587/readyz; }
lab_wait_for "the exporter ready" 120 ready || { cat exporter.log; exit 1; }

now() { date +%s.%N; }
# phase NAME: records this node's clock (node1's is Prometheus's) for the test.
phase() {
  local t
  t=$(now)
  lab_result "$1" "$t"
  printf -v "$1" %s "$t"
}

# urlencode TEXT: TEXT as a URL's query value.
urlencode() {
  local text=$1 i c out=
  for ((i = 0; i < ${#text}; i++)); do
    c=${text:i:1}
    case $c in
      [A-Za-z0-9._~-]) out+=$c ;;
      *) printf -v c '%%%02X' "'$c"; out+=$c ;;
    esac
  done
  echo "$out"
}
# count PROMQL: how many series an instant query returns (-1 when Prometheus does not answer):
# the result's objects, each with one "metric" (polled every second: bash alone, see lab_nap).
count() {
  local body n=0
  body=$(lab_get "$prom/api/v1/query?query=$(urlencode "$1")" 2>/dev/null) &&
    [[ $body == '{"status":"success"'* ]] || { echo -1; return; }
  while [[ $body == *'"metric":'* ]]; do
    body=${body#*'"metric":'}
    n=$((n + 1))
  done
  echo "$n"
}
# wait_count DESCRIPTION TIMEOUT_S PROMQL N: until the query returns N series.
wait_count() {
  local what=$1 limit=$2 query=$3 want=$4 start=$SECONDS got
  until got=$(count "$query") && [ "$got" = "$want" ]; do
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      echo "timed out after ${limit}s waiting for $what: $query returned $got series, not $want" >&2
      curl -sS --max-time 10 "$prom/api/v1/alerts" >&2
      return 1
    fi
    lab_nap 1
  done
  echo "$(date +%T) $what ($((SECONDS - start)) s)"
}
firing() { echo "ALERTS{alertstate=\"firing\"$1}"; }

start_prometheus() {
  cat >prometheus.yml <<EOF
global:
  scrape_interval: ${INTERVAL_SECONDS}s
  scrape_timeout: 5s
  evaluation_interval: ${INTERVAL_SECONDS}s
rule_files: [$files/rules.yaml]
alerting:
  alertmanagers:
    - static_configs: [{targets: ["127.0.0.1:9093"]}]
scrape_configs:
  # As deploy/README.md asks: instance = the node's name.
  - job_name: rdma-probe-exporter
    static_configs:
EOF
  for n in node1 node2 node3; do
    printf '      - {targets: ["%s:9587"], labels: {instance: %s}}\n' "$(lab_addr "$n")" "$n" >>prometheus.yml
  done
  "$files/prometheus" --config.file=prometheus.yml --storage.tsdb.path=/tmp/prometheus \
    --web.listen-address=127.0.0.1:9090 --log.level=warn >prometheus.log 2>&1 &
  prometheus=$!
  local start=$SECONDS
  until lab_ok "$prom/-/ready"; do
    [ $((SECONDS - start)) -ge 120 ] && { echo "prometheus not ready after 120 s" >&2; cat prometheus.log >&2; return 1; }
    lab_nap 1
  done
  lab_result prometheus_ready_seconds $((SECONDS - start))
}

hold() { lab_nap $((HOLD_INTERVALS * INTERVAL_SECONDS)); }

# Alertmanager with the shipped configuration (its receivers' URLs are this receiver's).
start_alertmanager() {
  # Debian's build reads its default template from the host's /usr/share (scripts/install-deps).
  [ -f /usr/share/prometheus/alertmanager/default.tmpl ] ||
    { echo "no /usr/share/prometheus/alertmanager/default.tmpl: run scripts/install-deps" >&2; return 1; }
  python3 "$files/alert_receiver.py" 127.0.0.1:9095 notifications.jsonl 2>receiver.log &
  receiver=$!
  "$files/alertmanager" --config.file="$files/alertmanager.yaml" --storage.path=/tmp/alertmanager \
    --web.listen-address=127.0.0.1:9093 --cluster.listen-address= --log.level=warn >alertmanager.log 2>&1 &
  alertmanager=$!
  local start=$SECONDS
  until lab_ok http://127.0.0.1:9093/-/ready; do
    [ $((SECONDS - start)) -ge 60 ] && { echo "alertmanager not ready after 60 s" >&2; cat alertmanager.log >&2; return 1; }
    lab_nap 1
  done
}
# wait_notification WHAT TIMEOUT_S: until a firing notification arrives after this call.
wait_notification() {
  local what=$1 limit=$2 start=$SECONDS seen
  seen=$(grep -c '"status": "firing"' notifications.jsonl 2>/dev/null || true)
  until [ "$(grep -c '"status": "firing"' notifications.jsonl 2>/dev/null || true)" -gt "${seen:-0}" ]; do
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      echo "timed out after ${limit}s waiting for a notification of $what" >&2
      curl -sS --max-time 10 "$prom/api/v1/alerts" >&2
      return 1
    fi
    lab_nap 1
  done
  echo "$(date +%T) notification of $what ($((SECONDS - start)) s)"
}

lab_barrier exporters-up 300
case $LAB_NODE in
node1)
  start_alertmanager || exit 1
  start_prometheus || exit 1
  wait_count "all targets up" 120 'up{job="rdma-probe-exporter"} == 1' 3 || exit 1
  phase up_start
  wait_count "every path succeeded" 240 'rdma_probe_success{job="rdma-probe-exporter"} == 1' 6 || exit 1

  # 1. Clean.
  phase clean_start
  lab_nap "$CLEAN_SECONDS"
  phase clean_end

  # 2. A rate cap on node2.
  lab_signal cap
  lab_wait_signal node2 capped 60 || exit 1
  phase cap_start
  wait_notification "the rate cap on node2" 300 || exit 1
  hold
  phase cap_end
  lab_signal uncap
  lab_wait_signal node2 uncapped 60 || exit 1
  wait_count "no alert after the cap" 300 "$(firing)" 0 || exit 1
  phase cap_cleared
  hold

  # 3. node3's RoCE port dead.
  lab_signal port
  lab_wait_signal node3 port-dead 60 || exit 1
  phase port_start
  wait_notification "node3's dead port" 300 || exit 1
  hold
  phase port_end
  lab_signal port-back
  lab_wait_signal node3 port-alive 60 || exit 1
  wait_count "no alert after the dead port" 300 "$(firing)" 0 || exit 1
  phase port_cleared
  hold

  # 4. node3 is powered off.
  phase stop_start
  lab_stop_node node3 || exit 1
  wait_notification "node3's loss" 300 || exit 1
  # Long enough for every alert that must stay held back (the longest for: is ExporterDown's 5
  # intervals), and its notification, to have come if it were not.
  HOLD_INTERVALS=$((HOLD_INTERVALS + 5)) hold
  phase stop_end

  # 5. What the test judges.
  # Every firing sample since Prometheus started (a range selector: the raw samples).
  since=$(awk -v e="$stop_end" -v s="$up_start" 'BEGIN {print int(e - s) + 60}')
  curl -sS --max-time 30 -G "$prom/api/v1/query" --data-urlencode "time=$stop_end" \
    --data-urlencode "query=ALERTS{alertstate=\"firing\"}[${since}s]" >alerts-firing.json || exit 1
  curl -sS --max-time 30 "$prom/api/v1/rules" >rules.json || exit 1
  # What each path measured, one sample an interval (the test shows it when a phase fails).
  for what in "ratio=path:rdma_probe_bandwidth:ratio" \
    "attempt-age=time() - rdma_probe_last_attempt_timestamp_seconds"; do
    curl -sS --max-time 30 -G "$prom/api/v1/query_range" --data-urlencode "query=${what#*=}" \
      --data-urlencode "start=$up_start" --data-urlencode "end=$stop_end" \
      --data-urlencode "step=$INTERVAL_SECONDS" >"path-history-${what%%=*}.json" || exit 1
  done
  python3 "$files/prometheus_queries.py" "$prom" "$files/dashboard-queries.json" \
    "$up_start" "$stop_end" "$INTERVAL_SECONDS" dashboard-results.json || exit 1
  lab_signal done
  kill -TERM "$prometheus" "$alertmanager" "$receiver"
  wait "$prometheus"
  ;;
node2)
  lab_wait_signal node1 cap 3600 || exit 1
  lab_tbf "$CAP"
  lab_signal capped
  lab_wait_signal node1 uncap 900 || exit 1
  lab_clear_faults
  lab_signal uncapped
  lab_wait_signal node1 done 900 || exit 1
  ;;
node3)
  lab_wait_signal node1 port 3600 || exit 1
  # Every UDP packet this node sends (RoCE v2) is dropped: its port is dead both ways.
  lab_slow_roce_ports 0 0 loss 100%
  lab_signal port-dead
  lab_wait_signal node1 port-back 900 || exit 1
  lab_clear_faults
  lab_signal port-alive
  # Runs until node1 powers this node off.
  lab_wait_signal node1 done 7200
  echo "node3 was not powered off" >&2
  exit 1
  ;;
esac
kill -TERM "$exporter"
wait "$exporter"
