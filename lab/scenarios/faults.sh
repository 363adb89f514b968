# Two nodes: the lab's fault injection works. netem loss 100% cuts node1 off, clearing it
# restores the link, link down cuts it again, and stopping node2 mid-scenario makes it unreachable.
peer=node2; [ "$LAB_NODE" = node2 ] && peer=node1
# reach: "yes" if the peer answers a ping within 8 s (emulated links and ARP after a link change
# can take a few seconds), else "no".
reach() {
  local i
  for i in 1 2 3 4; do
    ping -c 1 -W 2 "$(lab_addr "$peer")" >/dev/null 2>&1 && { echo yes; return; }
  done
  echo no
}
case $LAB_NODE in
  node1)
    lab_result baseline "$(reach)"
    lab_netem loss 100%
    lab_result netem_loss_100 "$(reach)"
    lab_clear_faults
    lab_result cleared "$(reach)"
    lab_tbf 1mbit
    tc qdisc show dev "$LAB_NIC" | grep -q tbf && lab_result tbf installed
    lab_clear_faults
    lab_link_down
    lab_result link_down "$(reach)"
    lab_link_up
    lab_nap 1
    lab_result link_up "$(reach)"
    lab_signal checks-done
    lab_stop_node node2 || exit 1
    lab_result after_stop "$(reach)"
    ;;
  node2)
    lab_wait_signal node1 checks-done 300
    lab_nap 600 # stopped by node1 long before this ends
    ;;
esac
