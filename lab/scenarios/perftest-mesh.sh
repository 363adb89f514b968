# Three nodes: every node checks its rxe0 GID, then each node reaches the other two with stock
# ib_write_bw, one pair per round: node1->node2, node2->node3, node3->node1.
source /mnt/scenarios/gid-check.sh || exit 1
pair() { # pair ROUND CLIENT SERVER
  local round=$1 client=$2 server=$3
  if [ "$LAB_NODE" = "$server" ]; then
    ib_write_bw -d rxe0 -x 1 -n 300 -F --report_gbits >"perftest-$round-server.txt" 2>&1 &
    local pid=$!
    lab_wait_listening 18515 || return 1
    lab_signal "server-$round"
    wait $pid || { cat "perftest-$round-server.txt"; return 1; }
  elif [ "$LAB_NODE" = "$client" ]; then
    lab_wait_signal "$server" "server-$round" || return 1
    ib_write_bw -d rxe0 -x 1 -n 300 -F --report_gbits "$(lab_addr "$server")" >"perftest-$round-client.txt" 2>&1 \
      || { cat "perftest-$round-client.txt"; return 1; }
    lab_result "pair_$round" "$LAB_NODE->$server"
  fi
  lab_barrier "round-$round"
}
pair 1 node1 node2 && pair 2 node2 node3 && pair 3 node3 node1
