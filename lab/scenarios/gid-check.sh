# Sourced by scenarios: this node lists rxe0 with an IPv4-mapped RoCE v2 GID (index 1).
ibv_devices | grep -q rxe0 || { echo "ibv_devices does not list rxe0"; return 1; }
gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1)
type=$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1)
lab_result gid1 "$gid"
lab_result gid1_type "$type"
case $gid in 0000:0000:0000:0000:0000:ffff:*) ;; *) echo "GID 1 ($gid) is not IPv4-mapped"; return 1 ;; esac
[ "$type" = "RoCE v2" ] || { echo "GID 1 type is '$type', not RoCE v2"; return 1; }
