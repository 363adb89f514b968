# Two nodes, UD pings with examples/ud_ping.rs (the verbs module's UD QPs and address handles,
# the ping module's packets and accounting, software timestamps): node2 answers for 60 s; node1
# pings node2 300 times 10 ms apart on a clean link, then with `netem delay 3ms` on its NIC, then
# 400 times with `netem loss 5%` (about 15 s in all), each run a JSON line in `clean.json`,
# `delay.json`, `loss.json`.
tool=ud_ping
case $LAB_NODE in
  node2)
    $tool serve rxe0 /mnt/nodes/node2/ud-qp /mnt/nodes/node1/ud-qp 60 >serve.json 2>serve.err
    lab_result serve_exit "$?"
    ;;
  node1)
    pings() {
      $tool ping rxe0 /mnt/nodes/node1/ud-qp /mnt/nodes/node2/ud-qp "$2" 10 >"$1.json" 2>"$1.err"
      lab_result "$1_exit" "$?"
    }
    lab_result icmp_rtt_ms "$(ping -c 20 -i 0.2 -q "$(lab_addr node2)" | awk -F/ '/^rtt/ {print $5}')"
    pings clean 300
    lab_netem delay 3ms
    pings delay 300
    lab_clear_faults
    lab_netem loss 5%
    pings loss 400
    lab_clear_faults
    ;;
esac
exit 0
