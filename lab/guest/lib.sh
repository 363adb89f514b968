# Functions for lab scenarios (sourced before the scenario, inside each VM, by bash).
# Environment: LAB_NODE (node1..), LAB_INDEX (1..), LAB_NODES (count), LAB_NIC, LAB_RUN (the
# scenario's run directory: barriers, and each node's output directory with its signals; /mnt, or
# /mnt/parts/NAME in a shared boot), LAB_DIR (this node's output directory in it), LAB_ADDR_nodeN (lab address of each node), LAB_DOORBELL_SO (the
# benchmark's LD_PRELOAD shim that measures CPU inside uverbs doorbell writes: lab/tools).

# lab_addr NODE: the node's address on the lab network.
lab_addr() { eval echo "\$LAB_ADDR_$1"; }
LAB_RUN=${LAB_RUN:-/mnt}

# lab_result KEY VALUE: records a result line for the test that runs the scenario.
lab_result() { echo "$1=$2" >>"$LAB_DIR/results"; }

# Waiting costs no process: under full emulation every process a guest starts costs it about
# 0.1 s of CPU, curl and python3 about 2 s (lab/README.md, "Waiting in a guest"), and a node
# polling with them takes the host CPU that the other nodes' emulation needs. The helpers below
# poll with bash alone; a scenario's own loops should too.
# lab_nap SECONDS: sleeps in bash itself (a read that times out on a FIFO nobody writes; the
# guests have no /dev/fd for a process substitution); `sleep` where the FIFO cannot be made.
lab_nap_fifo=/tmp/lab-nap.$$.$RANDOM
if mkfifo "$lab_nap_fifo" && exec {lab_nap_fd}<>"$lab_nap_fifo"; then
  rm -f "$lab_nap_fifo"
  lab_nap() { read -r -t "$1" -u "$lab_nap_fd" _ || true; }
else
  echo "lab/guest/lib.sh: no FIFO at $lab_nap_fifo: lab_nap starts sleep" >&2
  lab_nap() { sleep "$1"; }
fi

# lab_barrier NAME [TIMEOUT_S]: waits until every node reached the barrier (default 180 s).
lab_barrier() {
  local name=$1 limit=${2:-180} start=$SECONDS
  mkdir -p "$LAB_RUN/barriers/$name"
  touch "$LAB_RUN/barriers/$name/$LAB_NODE"
  local arrived=("$LAB_RUN/barriers/$name"/*)
  while [ "${#arrived[@]}" -lt "$LAB_NODES" ]; do
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      echo "lab_barrier $name: timed out after ${limit}s" >&2
      return 1
    fi
    lab_nap 0.2
    arrived=("$LAB_RUN/barriers/$name"/*)
  done
}

# lab_wait_port HOST PORT [TIMEOUT_S]: waits until a TCP port accepts connections.
lab_wait_port() {
  local host=$1 port=$2 limit=${3:-60} start=$SECONDS
  until timeout 2 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; do
    [ $((SECONDS - start)) -ge "$limit" ] && { echo "lab_wait_port $host:$port: timed out" >&2; return 1; }
    lab_nap 0.2
  done
}

# lab_wait_file PATH [TIMEOUT_S]: waits until a file exists (e.g. one written by another node).
lab_wait_file() {
  local path=$1 limit=${2:-120} start=$SECONDS
  until [ -e "$path" ]; do
    [ $((SECONDS - start)) -ge "$limit" ] && { echo "lab_wait_file $path: timed out" >&2; return 1; }
    lab_nap 0.2
  done
}

# Fault injection on this node's lab NIC.
lab_netem() { tc qdisc replace dev "$LAB_NIC" root netem "$@"; }             # e.g. loss 5% / delay 10ms
lab_tbf() { tc qdisc replace dev "$LAB_NIC" root tbf rate "$1" burst 64kb latency 400ms; }  # e.g. 50mbit
lab_clear_faults() { tc qdisc del dev "$LAB_NIC" root 2>/dev/null || true; }
# lab_netem_to HOST NETEM...: netem (e.g. `loss 1%`) on this node's packets to HOST only (with
# `lab_netem` on HOST itself: HOST's link is faulty both ways).
lab_netem_to() {
  local host=$1
  shift
  tc qdisc replace dev "$LAB_NIC" root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 &&
    tc qdisc add dev "$LAB_NIC" parent 1:2 handle 20: netem "$@" &&
    tc filter add dev "$LAB_NIC" parent 1: protocol ip prio 1 u32 match ip dst "$host/32" flowid 1:2
}
# lab_slow_roce_ports VALUE MASK NETEM...: netem (e.g. `rate 5mbit`) on this node's RoCE v2 packets
# (UDP to 4791) whose UDP source port & MASK == VALUE, and on nothing else: one ECMP path's fault.
lab_slow_roce_ports() {
  local value=$1 mask=$2
  shift 2
  tc qdisc replace dev "$LAB_NIC" root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 &&
    tc qdisc add dev "$LAB_NIC" parent 1:2 handle 20: netem "$@" &&
    tc filter add dev "$LAB_NIC" parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff \
      match ip dport 4791 0xffff match ip sport "$value" "$mask" flowid 1:2
}
lab_link_down() { ip link set "$LAB_NIC" down; }
lab_link_up() { ip link set "$LAB_NIC" up; }

# lab_stop_node NODE: asks the runner to kill NODE's VM at once (a power cut, not a shutdown).
lab_stop_node() {
  touch "/mnt/requests/stop-$1"
  lab_wait_file "/mnt/nodes/$1/stopped" 30
}

# lab_wait_listening PORT [TIMEOUT_S]: waits until a local TCP port listens, without connecting
# (a stock ib_write_bw server accepts exactly one connection: a probe connect would consume it).
lab_wait_listening() {
  local port=$1 limit=${2:-60} start=$SECONDS
  until lab_listening "$port"; do
    [ $((SECONDS - start)) -ge "$limit" ] && { echo "lab_wait_listening $port: timed out" >&2; return 1; }
    lab_nap 0.1
  done
}
# lab_listening PORT: a local TCP socket listens on PORT (state 0A in /proc/net/tcp or tcp6).
lab_listening() {
  local want table address state
  printf -v want ':%04X' "$1"
  for table in /proc/net/tcp /proc/net/tcp6; do
    [ -r "$table" ] || continue
    while read -r _ address _ state _; do
      [ "$state" = 0A ] && [ "${address: -5}" = "$want" ] && return 0
    done <"$table"
  done
  return 1
}

# lab_start_responder [ARGS...]: this node's responder on the lab port with the scenario's key
# (/tmp/psk) and ARGS, logging to responder.log; sets $responder to its pid once it listens.
lab_start_responder() {
  rdma-probe-exporter responder --listen 0.0.0.0:18516 --device rxe0 --psk-file /tmp/psk "$@" >responder.log 2>&1 &
  responder=$!
  lab_wait_listening 18516 || { cat responder.log; return 1; }
}

# lab_signal NAME / lab_wait_signal NODE NAME [TIMEOUT_S]: one node tells others it reached a point.
# lab_wait_for DESCRIPTION TIMEOUT_S COMMAND...: runs COMMAND every 0.5 s until it succeeds; after
# TIMEOUT_S it says what it waited for (with the last lines of the scenario's exporter.log, when
# there is one) and returns 1.
lab_wait_for() {
  local what=$1 limit=$2 start=$SECONDS
  shift 2
  until "$@"; do
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      echo "timed out after ${limit}s waiting for: $what" >&2
      [ -f exporter.log ] && tail -n 30 exporter.log >&2
      return 1
    fi
    lab_nap 0.5
  done
}
lab_signal() { touch "$LAB_RUN/nodes/$LAB_NODE/signal-$1"; }
lab_wait_signal() { lab_wait_file "$LAB_RUN/nodes/$1/signal-$2" "${3:-120}"; }

# lab_perftest_pair CLIENT SERVER TAG ARGS...: one stock ib_write_bw run from CLIENT to SERVER
# (both nodes call it; other nodes return at once). The client's output lands in
# perftest-TAG-client.txt. perftest derives time from the TSC and a clock rate it calibrates by
# regression; under full emulation the fit sometimes fails ("r^2 < 0.9") and it then reports
# 0 Gb/s. Such a run is repeated (up to 3 tries, with a fresh server each: a server serves one
# client); the tries are recorded as perftest_TAG_tries. Any other failure is final.
lab_perftest_pair() {
  local client=$1 server=$2 tag=$3 try
  shift 3
  for try in 1 2 3; do
    if [ "$LAB_NODE" = "$server" ]; then
      ib_write_bw "$@" >"perftest-$tag-server.txt" 2>&1 &
      local pid=$!
      lab_wait_listening 18515 || return 1
      lab_signal "perftest-$tag-up-$try"
      wait $pid
      lab_wait_signal "$client" "perftest-$tag-done-$try" 300 || return 1
      [ -e "$LAB_RUN/nodes/$client/signal-perftest-$tag-retry-$try" ] || return 0
    elif [ "$LAB_NODE" = "$client" ]; then
      lab_wait_signal "$server" "perftest-$tag-up-$try" || return 1
      ib_write_bw "$@" "$(lab_addr "$server")" >"perftest-$tag-client.txt" 2>&1
      local rc=$?
      if grep -q 'r^2' "perftest-$tag-client.txt" &&
        awk '/#bytes/ {getline; exit !($4 == 0)}' "perftest-$tag-client.txt"; then
        echo "ib_write_bw $tag try $try: clock calibration failed (r^2 < 0.9), 0 Gb/s reported: retrying"
        lab_signal "perftest-$tag-retry-$try"
        lab_signal "perftest-$tag-done-$try"
        continue
      fi
      lab_signal "perftest-$tag-done-$try"
      lab_result "perftest_${tag}_tries" "$try"
      return $rc
    else
      return 0
    fi
  done
  [ "$LAB_NODE" = "$client" ] && cat "perftest-$tag-client.txt"
  return 1
}

# lab_json FILE KEY: a top-level field of the JSON object in FILE (empty when absent).
lab_json() { /usr/bin/python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else v)' "$1" "$2" 2>/dev/null; }

# lab_link_fraction_mbps FILE PERCENT: PERCENT of the bandwidth a probe's JSON in FILE measured,
# in whole Mb/s (at least 1). Rate-dependent checks take their limits from the link measured in
# the same run: a fixed limit is a fraction of a fast machine's link and above a slow one's.
lab_link_fraction_mbps() {
  local bw
  bw=$(lab_json "$1" bandwidth_bytes_per_second)
  [ -n "$bw" ] || { echo "lab_link_fraction_mbps: no bandwidth in $1" >&2; return 1; }
  awk -v b="$bw" -v p="$2" 'BEGIN { m = int(b * 8e-6 * p / 100); print (m < 1 ? 1 : m) }'
}

# lab_messages_for MBPS SECONDS [SIZE]: how many SIZE-byte messages (default 65536) take SECONDS at
# MBPS (at least 10).
lab_messages_for() {
  awk -v r="$1" -v s="$2" -v z="${3:-65536}" 'BEGIN { n = int(r * 1e6 / 8 * s / z); print (n < 10 ? 10 : n) }'
}

# HTTP on this node without curl (see lab_nap): lab_get URL prints what `curl -sS --max-time 5
# URL` prints, the body (HTTP/1.0 through bash's /dev/tcp, so the server closes after it).
# Exit status as curl's: 0 for a 2xx answer, 22 for another (the body is printed all the same),
# 7 when nothing listens, 28 when no answer comes within 5 s. A URL on another node
# (http://ADDRESS:PORT/..., which may be powered off: bash's connect has no time limit) goes to
# curl itself. lab_http_code URL prints the status code alone (000 when nothing answers);
# lab_ok URL: the answer is a 2xx.
lab_get() {
  local line
  case $1 in
    http://127.0.0.1:*) ;;
    *) curl -sS --max-time 5 --fail-with-body "$1"; return ;;
  esac
  lab_http_request "$1"
  case $? in
    7) echo "lab_get: nothing listens at $1" >&2; return 7 ;;
    28) echo "lab_get: no answer from $1 within 5 s" >&2; return 28 ;;
  esac
  while read -r -t 5 line <&"$lab_http_fd" && [ -n "${line%$'\r'}" ]; do :; done
  timeout 5 cat <&"$lab_http_fd"
  exec {lab_http_fd}<&-
  [[ $lab_http_status == 2?? ]] || return 22
}
lab_http_code() {
  case $1 in
    http://127.0.0.1:*) ;;
    *) curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$1"; return 0 ;;
  esac
  lab_http_request "$1" 2>/dev/null && exec {lab_http_fd}<&-
  echo "$lab_http_status"
}
# lab_http_request URL: connects to the local URL, sends the GET and reads the status line:
# lab_http_fd is the connection, still open for the headers and the body, lab_http_status the
# code. Returns 7 when nothing listens, 28 when no status line comes within 5 s (closed then).
lab_http_request() {
  local rest=${1#http://} authority path
  authority=${rest%%/*}
  path=${rest#"$authority"}
  lab_http_status=000
  exec {lab_http_fd}<>"/dev/tcp/127.0.0.1/${authority#*:}" || return 7
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "${path:-/}" "$authority" >&"$lab_http_fd"
  read -r -t 5 _ lab_http_status _ <&"$lab_http_fd" && return 0
  exec {lab_http_fd}<&-
  lab_http_status=000
  return 28
}
lab_ok() { [[ $(lab_http_code "$1") == 2?? ]]; }

# lab_wait_metric URL SERIES MIN [TIMEOUT_S]: waits until the sample of SERIES (the exact series
# text, labels included) scraped from URL is at least MIN. For waiting on an event the scenario
# cannot see directly (a session set up on a peer) instead of sleeping a guessed time.
# The local exporter's /metrics, at $url when the scenario sets it (else the default port).
lab_scrape() { lab_get "${url:-http://127.0.0.1:9587}/metrics"; }
# lab_value SERIES: the sample of the exact series (labels included); empty when absent.
lab_value() { lab_scrape | awk -v s="$1" 'index($0, s " ") == 1 { print $2; exit }'; }
# lab_is SERIES N / lab_at_least SERIES N: the series is present and equals / is at least N.
lab_is() { local v; v=$(lab_value "$1"); [ -n "$v" ] && awk -v v="$v" -v w="$2" 'BEGIN { exit !(v == w) }'; }
lab_at_least() { local v; v=$(lab_value "$1"); [ -n "$v" ] && awk -v v="$v" -v w="$2" 'BEGIN { exit !(v >= w) }'; }
# lab_sum FAMILY PEER: the sum of a family's samples whose peer label is PEER.
lab_sum() { lab_scrape | awk -v f="$1{" -v p="peer=\"$2\"" 'index($0, f) == 1 && index($0, p) { s += $2 } END { print s + 0 }'; }
# lab_above FAMILY PEER N: that sum is above N.
lab_above() { [ "$(lab_sum "$1" "$2")" -gt "$3" ]; }

lab_wait_metric() {
  local url=$1 series=$2 min=$3 limit=${4:-120} start=$SECONDS value
  while :; do
    value=$(lab_get "$url" 2>/dev/null | awk -v s="$series" 'index($0, s " ") == 1 {print $2; exit}')
    [ -n "$value" ] && awk -v v="$value" -v m="$min" 'BEGIN {exit !(v >= m)}' && return 0
    [ $((SECONDS - start)) -ge "$limit" ] && { echo "lab_wait_metric: $series stayed below $min at $url" >&2; return 1; }
    lab_nap 0.5
  done
}
