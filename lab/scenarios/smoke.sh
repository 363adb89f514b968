# Every node lists rxe0 with an IPv4-mapped RoCE v2 GID.
ibv_devices
ibv_devinfo -d rxe0 | grep -E 'state|active_mtu|link_layer'
gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1)
type=$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1)
echo "gid1=$gid type=$type"
lab_result gid1 "$gid"
lab_result gid1_type "$type"
case $gid in 0000:0000:0000:0000:0000:ffff:*) ;; *) echo "GID 1 is not IPv4-mapped"; exit 1 ;; esac
[ "$type" = "RoCE v2" ] || { echo "GID 1 is not RoCE v2"; exit 1; }
