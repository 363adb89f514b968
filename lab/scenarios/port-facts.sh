# One node: what `devices` and the exporter's port gauges say about rxe0, read from the real
# sysfs (the `port` module's fixtures copy this layout), and the allowlisted counters rising
# across a burst: a probe over rxe's loopback (responder and prober on this node's own GID).
bin=rdma-probe-exporter
port=/sys/class/infiniband/rxe0/ports/1
lab_result rate "$(cat $port/rate)"
lab_result netdev_speed "$(cat /sys/class/net/$LAB_NIC/speed 2>&1)"
$bin devices --json >devices-before.json; echo "devices exit=$?" >>exits
$bin devices >devices.txt; echo "devices-text exit=$?" >>exits

$bin responder --listen 127.0.0.1:18516 --device rxe0 --no-auth >responder.log 2>&1 &
responder=$!
lab_wait_listening 18516 || { cat responder.log; exit 1; }
$bin probe 127.0.0.1:18516 --device rxe0 --no-auth --json --qp-timeout 17 --messages 200 \
  --size 16KiB >probe.json; echo "probe exit=$?" >>exits
kill -TERM $responder; wait $responder; echo "responder exit=$?" >>exits
$bin devices --json >devices-after.json; echo "devices-after exit=$?" >>exits

# The exporter's port gauges: a peer that does not exist, so nothing but the port reader (at
# start, then every 30 s) and the failing probes happen.
(umask 077 && echo "bGFiLXBvcnQtZmFjdHMtcHNrLTAxMjM0NTY3ODlhYmNkZWY=" >/tmp/psk)
cat >/tmp/exporter.yaml <<EOC
node: $LAB_NODE
auth: {psk_file: /tmp/psk}
listen: {metrics: 127.0.0.1:9587, control: 0.0.0.0:18516}
devices:
  - {name: rxe0, port: 1}
defaults: {interval: 60s, timeout: 2s}
peers:
  - {name: ghost, address: 192.0.2.99:18516}
EOC
$bin run --config /tmp/exporter.yaml >exporter.log 2>&1 &
exporter=$!
lab_wait_metric http://127.0.0.1:9587/metrics 'rdma_probe_port_up{device="rxe0",port="1"}' 1 60 \
  || { cat exporter.log; exit 1; }
lab_get http://127.0.0.1:9587/metrics >metrics.txt; echo "metrics exit=$?" >>exits
kill -TERM $exporter; wait $exporter; echo "exporter exit=$?" >>exits
cat exits
