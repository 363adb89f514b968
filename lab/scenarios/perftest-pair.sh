# Two nodes: stock ib_write_bw server on node2, client on node1 (64 KiB, 500 iterations).
lab_perftest_pair node1 node2 pair -d rxe0 -x 1 -n 500 -F --report_gbits || exit 1
[ "$LAB_NODE" = node1 ] && cat perftest-pair-client.txt
exit 0
