#!/bin/bash
# Runs inside each lab VM (chroot of the host's root, run directory at /mnt): brings up the lab
# NIC and Soft-RoCE, tells the runner it is ready, runs the scenario, records its exit status.
node=$1
set -a; source /mnt/lab.env; set +a
idx=${node#node}
dir=/mnt/nodes/$node
export LAB_NODE=$node LAB_INDEX=$idx LAB_DIR=$dir HOME=/tmp
export PATH=/mnt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mac=$(printf '52:54:00:4c:41:%02x' "$idx")
nic=$(for d in /sys/class/net/*; do [ "$(cat "$d/address" 2>/dev/null)" = "$mac" ] && basename "$d"; done | head -n1)
fail() { echo "lab-node $node: $*" | tee "$dir/setup-error"; echo 125 >"$dir/status"; exit 0; }
[ -n "$nic" ] || fail "no lab NIC with MAC $mac"
hostname "$node" 2>/dev/null || true
ip link set lo up
ip link set "$nic" up || fail "cannot bring $nic up"
ip addr add "$(eval echo \$LAB_ADDR_$node)/24" dev "$nic" || fail "cannot address $nic"
rdma link add rxe0 type rxe netdev "$nic" || fail "rdma link add rxe0 failed (see console.log)"
export LAB_NIC=$nic
# Wait for the port to turn ACTIVE and its IPv4 GID to appear (both are asynchronous).
for _ in $(seq 100); do
  grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null &&
    grep -qv '^0000:0000:0000:0000:0000:0000:0000:0000$' /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null && break
  sleep 0.1
done
ulimit -l unlimited
touch "$dir/ready"
cd "$dir"
bash -c 'source /mnt/guest/lib.sh && source /mnt/scenario.sh' >"$dir/log" 2>&1
status=$?
# The port's counters after the scenario (retransmissions, sequence errors, ...): evidence for
# whoever reads a failed run.
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
  echo "$(basename "$f")=$(cat "$f" 2>/dev/null)"
done >"$dir/hw_counters" 2>/dev/null
echo $status >"$dir/status"
