# Two nodes: stock ib_write_bw server on node2, client on node1 (64 KiB, 500 iterations).
case $LAB_NODE in
  node2)
    ib_write_bw -d rxe0 -x 1 -n 500 -F --report_gbits &
    server=$!
    lab_wait_listening 18515 || exit 1
    lab_signal server-up
    wait $server
    ;;
  node1)
    lab_wait_signal node2 server-up || exit 1
    ib_write_bw -d rxe0 -x 1 -n 500 -F --report_gbits "$(lab_addr node2)"
    ;;
  *) exit 0 ;;
esac
