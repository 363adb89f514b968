# Three nodes: every node checks its rxe0 GID, then each node reaches the other two with stock
# ib_write_bw, one pair per round: node1->node2, node2->node3, node3->node1.
source /mnt/scenarios/gid-check.sh || exit 1
pair() { # pair ROUND CLIENT SERVER
  lab_perftest_pair "$2" "$3" "$1" -d rxe0 -x 1 -n 300 -F --report_gbits || return 1
  [ "$LAB_NODE" = "$2" ] && lab_result "pair_$1" "$2->$3"
  lab_barrier "round-$1"
}
pair 1 node1 node2 && pair 2 node2 node3 && pair 3 node3 node1
