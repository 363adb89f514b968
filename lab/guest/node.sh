#!/bin/bash
# Runs inside each lab VM (chroot of the host's root, run directory at /mnt): brings up the lab
# NIC and Soft-RoCE, tells the runner it is ready, runs the scenario (or the scenarios of a
# shared boot, /mnt/parts.list, one after another), records its exit status.
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
# wait_active: until the port is ACTIVE and its IPv4 GID has appeared (both are asynchronous).
wait_active() {
  for _ in $(seq 100); do
    grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null &&
      grep -qv '^0000:0000:0000:0000:0000:0000:0000:0000$' /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null && return 0
    sleep 0.1
  done
}
wait_active
ulimit -l unlimited
touch "$dir/ready"

# run_scenario RUN SCRIPT: runs SCRIPT with its run directory RUN (barriers, signals, each node's
# output directory: /mnt for a run of one scenario, /mnt/parts/NAME for a part of a shared boot),
# in a mount namespace of its own (a bind mount it makes ends with it), and records its exit
# status, its start and end times, and the port's counters after it (retransmissions, sequence errors, ...: evidence for
# whoever reads a failed run).
run_scenario() {
  local run=$1 script=$2 out=$1/nodes/$node status
  export LAB_RUN=$run LAB_DIR=$out
  cd "$out" || return 1
  date +%s.%N >"$out/started"
  unshare --mount --propagation private bash -c 'source /mnt/guest/lib.sh && source "$0"' "$script" >"$out/log" 2>&1
  status=$?
  date +%s.%N >"$out/ended"
  (cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep -H '' -- *) 2>/dev/null |
    sed 's/:/=/' >"$out/hw_counters"
  echo $status >"$out/status"
  return $status
}

# reset_node: what a part of a shared boot leaves is gone before the next one starts: every
# process it started (daemons included), its qdiscs, a link it took down, its files in /tmp
# and /run. Only this script and its ancestors (the VM's init) are kept.
reset_node() {
  local keep=" 1 " pid=$$ p
  while [ "$pid" -gt 1 ]; do
    keep="$keep$pid "
    read -r _ _ _ pid _ <"/proc/$pid/stat"
  done
  # Read with builtins only: a process started for each of ~100 entries takes seconds on an
  # emulated CPU.
  local arg0
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    case $keep in *" $p "*) continue ;; esac
    # Kernel threads have no command line and ignore signals anyway.
    arg0=
    IFS= read -r -d '' arg0 <"/proc/$p/cmdline" 2>/dev/null
    [ -n "$arg0" ] && kill -9 "$p" 2>/dev/null
  done
  sleep 0.5
  tc qdisc del dev "$nic" root 2>/dev/null
  ip link set "$nic" up
  ip -all netns delete 2>/dev/null
  find /tmp /run -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null
  wait_active
}

cd "$dir"
if [ ! -f /mnt/parts.list ]; then
  run_scenario /mnt /mnt/scenario.sh
  exit 0
fi
# A shared boot: the parts one after another, every node starting each together.
failed=0
first=1
while read -r part; do
  [ "$first" = 1 ] || reset_node
  first=0
  LAB_RUN=/mnt bash -c 'source /mnt/guest/lib.sh && lab_barrier "part-$0" 600' "$part" ||
    echo "lab-node $node: the other nodes did not reach part $part" >>"/mnt/parts/$part/nodes/$node/setup-error"
  run_scenario "/mnt/parts/$part" "/mnt/parts/$part/scenario.sh" || failed=1
done </mnt/parts.list
echo $failed >"$dir/status"
