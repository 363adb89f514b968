# The container image's root file system (deploy/image/build-rootfs, given as one tar with its
# extended attributes, /mnt/files/rootfs.tar) on two nodes, the exporter run from it as the
# DaemonSet runs it:
#   - unpacked as a container runtime unpacks a layer (here into a tmpfs: the lab's 9p share of
#     the host carries no security.* attributes, so the binary's capability would not show), then
#     read-only (readOnlyRootFilesystem); chrooted into it, with
#     /proc, a read-only /sys, a /dev holding only null, zero, random, urandom and
#     /dev/infiniband, the config and key mounted where the ConfigMap and Secret go;
#   - as uid/gid 65532 with no new privileges, IPC_LOCK the only capability in its bounding set,
#     and RLIMIT_MEMLOCK at 64 KiB, so that only the binary's file capability lets it pin the
#     sessions' memory;
#   - `run --config /etc/rdma-probe/config/config.yaml`, NODE_NAME the node's name, both nodes
#     in the peer list (each skips itself).
# Both exporters measure their path to the other; each node records the process's identity,
# capabilities, limits and the libibverbs and provider it loaded (from the image's root), and a
# scrape. Then node1 stops its exporter (SIGTERM) and, against node2's:
#   - the image's binary without IPC_LOCK in the bounding set: the kernel refuses to start it;
#   - the plain binary (no file capability) as an unprivileged user with no capability at all,
#     as the systemd unit runs it: with RLIMIT_MEMLOCK unlimited a probe succeeds, at 64 KiB it
#     refuses to start, naming the limit.
set -u
R=/tmp/image
url=http://127.0.0.1:9587
mkdir -p "$R" && mount -t tmpfs -o size=256m image "$R"
t0=$(date +%s.%N)
tar -C "$R" --xattrs --xattrs-include='*' --numeric-owner -xpf /mnt/files/rootfs.tar ||
  { echo "cannot unpack the image" >&2; exit 1; }
lab_result unpack_seconds "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
mount -o remount,ro "$R"
[ -x "$R/usr/local/bin/rdma-probe-exporter" ] || { echo "no exporter in the image" >&2; exit 1; }

# The pod's mounts.
mount -t proc proc "$R/proc"
mount -t sysfs -o ro sysfs "$R/sys"
mount -t tmpfs -o mode=0755,size=1m dev "$R/dev"
for d in null zero random urandom; do
  touch "$R/dev/$d" && mount --bind "/dev/$d" "$R/dev/$d"
done
mkdir "$R/dev/infiniband" && mount --bind /dev/infiniband "$R/dev/infiniband"
mount -t tmpfs -o mode=0755,size=1m etc-rdma-probe "$R/etc/rdma-probe"
mkdir "$R/etc/rdma-probe/config" "$R/etc/rdma-probe/secret"
echo "bGFiLWltYWdlLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZA==" >"$R/etc/rdma-probe/secret/psk"
# The Secret as the kubelet writes it with fsGroup 65532: owned by root, group 65532, 0440
# (the group may read a root-owned key file, docs/security.md "Key files").
chgrp 65532 "$R/etc/rdma-probe/secret/psk" && chmod 0440 "$R/etc/rdma-probe/secret/psk"
cat >"$R/etc/rdma-probe/config/config.yaml" <<EOF
node: \${NODE_NAME}
auth: {psk_file: /etc/rdma-probe/secret/psk}
devices:
  - {name: rxe0, port: 1, rail: 0}
schedule: {duty_cycle: 20%}
defaults:
  interval: 4s
  jitter: 10%
  message_size: 16KiB
  burst: {duration: 150ms}
  rate_limit: 20Mbps
  unpaced_every: 0
  qp_timeout: 17
  timeout: 5s
peers:
  - {name: node1, address: "$(lab_addr node1):18516"}
  - {name: node2, address: "$(lab_addr node2):18516"}
EOF
# A read-only root, as readOnlyRootFilesystem makes it.
touch "$R/probe-write" 2>/dev/null && { echo "the image root is writable" >&2; exit 1; }

# in_pod [--bounding CAPS] [--memlock BYTES] COMMAND...: COMMAND in the image's root as the
# DaemonSet's user, with a clean environment. It execs: call it in a subshell or in the
# background (then $! is COMMAND's pid).
in_pod() {
  local bounding=-all,+ipc_lock memlock=65536
  while :; do
    case $1 in
      --bounding) bounding=$2; shift 2 ;;
      --memlock) memlock=$2; shift 2 ;;
      *) break ;;
    esac
  done
  exec env -i NODE_NAME="$LAB_NODE" PATH=/usr/local/bin:/usr/bin:/bin \
    /usr/sbin/chroot "$R" prlimit --memlock="$memlock:$memlock" \
    setpriv --reuid=65532 --regid=65532 --groups=65532 --inh-caps=-all \
    --bounding-set="$bounding" --no-new-privs -- "$@"
}

in_pod rdma-probe-exporter run --config /etc/rdma-probe/config/config.yaml >exporter.log 2>&1 &
pid=$!
ready() { lab_ok "$url/readyz"; }
start=$SECONDS
until ready || [ $((SECONDS - start)) -ge 180 ]; do kill -0 $pid 2>/dev/null || break; lab_nap 0.5; done
ready || { echo "the exporter from the image is not ready" >&2; cat exporter.log >&2; exit 1; }

# Who runs, with what: the exporter is the child of setpriv's exec chain, i.e. $pid itself.
status=/proc/$pid/status
lab_result uid "$(awk '/^Uid:/ {print $2}' "$status")"
lab_result gid "$(awk '/^Gid:/ {print $2}' "$status")"
lab_result cap_eff "$(awk '/^CapEff:/ {print $2}' "$status")"
lab_result cap_bnd "$(awk '/^CapBnd:/ {print $2}' "$status")"
lab_result no_new_privs "$(awk '/^NoNewPrivs:/ {print $2}' "$status")"
lab_result memlock "$(awk '/^Max locked memory/ {print $4}' "/proc/$pid/limits")"
lab_result libibverbs "$(grep -o '/[^ ]*libibverbs\.so[^ ]*' "/proc/$pid/maps" | head -n1)"
lab_result provider "$(grep -o '/[^ ]*librxe-rdmav[^ ]*' "/proc/$pid/maps" | head -n1)"
# The image keeps no tool that sets or shows capabilities (the host's getcap reads its file).
lab_result getcap "$(getcap "$R/usr/local/bin/rdma-probe-exporter")"
# Nothing in it can gain privileges, nor holds the debug image's tools.
lab_result setuid_files "$(find "$R" -xdev -type f -perm /6000 | wc -l)"
lab_result debug_tools "$(for t in setcap getcap getpcaps ib_write_bw ibv_devinfo; do
  [ -e "$R/usr/bin/$t" ] || [ -e "$R/usr/sbin/$t" ] && printf '%s ' "$t"; done)"

other=$([ "$LAB_NODE" = node1 ] && echo node2 || echo node1)
success="rdma_probe_success{device=\"rxe0\",peer=\"$other\",peer_device=\"rxe0\"}"
up() { lab_get "$url/metrics" | grep -qxF "$success 1"; }
start=$SECONDS
until up; do
  if [ $((SECONDS - start)) -ge 120 ] || ! kill -0 $pid 2>/dev/null; then
    echo "no success for $other" >&2; tail -n 30 exporter.log >&2; exit 1
  fi
  lab_nap 0.5
done
lab_result up_seconds $((SECONDS - start))
lab_get "$url/metrics" >metrics.txt
lab_get "$url/healthz" >healthz.txt
lab_get "$url/readyz" >readyz.txt
lab_barrier both-up 240 || exit 1

if [ "$LAB_NODE" = node1 ]; then
  kill -TERM $pid
  wait $pid
  lab_result stop_status $?
  # The key as the unprivileged user's own file: a key file must be private (docs/security.md).
  (umask 077 && echo "bGFiLWltYWdlLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZA==" >/tmp/psk) && chown 65532:65532 /tmp/psk
  peer=$(lab_addr node2):18516
  # The image's binary in a container without IPC_LOCK.
  (in_pod --bounding -all rdma-probe-exporter --version) >no-ipc-lock.txt 2>&1
  lab_result no_ipc_lock_exit $?
  # The plain binary, unprivileged and without capabilities, as under systemd. A probe that
  # node2's own bursts make wait (busy) is tried again.
  bare_probe() {
    local memlock=$1 out=$2 try
    for try in 1 2 3 4 5; do
      env -i PATH=/usr/bin:/bin prlimit --memlock="$memlock:$memlock" \
        setpriv --reuid=65532 --regid=65532 --clear-groups --inh-caps=-all --bounding-set=-all \
        --no-new-privs -- /mnt/bin/rdma-probe-exporter probe "$peer" --device rxe0 \
        --psk-file /tmp/psk --duration 1s --rate-limit 20Mbps --qp-timeout 17 --json >"$out" 2>"$out.err"
      local rc=$?
      grep -q '"deferred"' "$out" || return $rc
      lab_nap 1
    done
    return $rc
  }
  bare_probe unlimited unlimited.json
  lab_result bare_unlimited_exit $?
  bare_probe 65536 limited.json
  lab_result bare_limited_exit $?
  lab_signal done
else
  lab_wait_signal node1 done 300 || exit 1
  kill -TERM $pid
  wait $pid
  lab_result stop_status $?
fi
