# The kernel trial's traffic (lab/kernel-trial, lab/README.md "Kernel"): the heaviest traffic of
# the lab tests on three nodes, so that a guest kernel that breaks under it shows in the consoles.
# node1 -> node2: stock ib_write_bw (500 x 64 KiB) for reference, then our probe alike three
# times, two 8-QP bursts, and two bursts over a link losing 0.5% of node1's frames; then all three
# nodes run the exporter (config/lab.yaml, 2 s intervals) for TRIAL_EXPORTER_SECONDS (default 60).
# Results: each probe's bandwidth and whether it validated, how many probes ran, the exporter's
# successful bursts; lab/kernel-trial judges from them whether the boot's traffic ran.
bin=rdma-probe-exporter
url=http://127.0.0.1:9587
(umask 077 && echo "bGFiLXRyaWFsLXBzay0wMTIzNDU2Nzg5YWJjZGVmLXBhZGRlZA==" >/tmp/psk) # config/lab.yaml: auth: {psk_file: /tmp/psk}

# The exporters' config: config/lab.yaml with 2 s intervals and an 80% duty cycle, whatever values
# it holds now. The file must hold exactly one line of each shape: another shape fails here, on
# every node at once, rather than running the trial at the lab's own pace unnoticed.
interval_line='^  interval: *[0-9]+[a-z]+ *$'
duty_line='^schedule: *\{ *duty_cycle: *[0-9]+% *\} *$'
if [ "$(grep -cE "$interval_line" /mnt/files/lab.yaml)" != 1 ] ||
  [ "$(grep -cE "$duty_line" /mnt/files/lab.yaml)" != 1 ]; then
  echo "kernel-trial.sh: config/lab.yaml has not one line matching '$interval_line' and one" \
    "matching '$duty_line': update the trial's config substitution" >&2
  exit 1
fi
sed -E "s/$interval_line/  interval: 2s/; s/$duty_line/schedule: {duty_cycle: 80%}/" \
  /mnt/files/lab.yaml >/tmp/trial.yaml
grep -qx '  interval: 2s' /tmp/trial.yaml && grep -qx 'schedule: {duty_cycle: 80%}' /tmp/trial.yaml ||
  { echo "kernel-trial.sh: the trial's config substitution did not apply" >&2; exit 1; }
lab_barrier booted
lab_perftest_pair node1 node2 ref -d rxe0 -x 1 -n 500 -F --report_gbits || exit 1
if [ "$LAB_NODE" = node1 ]; then
  lab_result perftest_gbps "$(awk '/#bytes/ {getline; print $4; exit}' perftest-ref-client.txt)"
fi

case $LAB_NODE in
  node2)
    lab_start_responder || exit 1
    lab_signal responder-up
    lab_wait_signal node1 probes-done 600 || exit 1
    kill -TERM "$responder"
    wait "$responder"
    lab_result responder_exit $?
    ;;
  node1)
    lab_wait_signal node2 responder-up || exit 1
    n=0
    # probe TAG ARGS...: one burst into node2's responder; its bandwidth (Gb/s) and whether every
    # message validated are results, its exit status too (a failure is recorded, not fatal: the
    # trial counts kernels breaking, and goes on to load the kernel further).
    probe() {
      local tag=$1
      shift
      n=$((n + 1))
      $bin probe "$(lab_addr node2):18516" --device rxe0 --psk-file /tmp/psk --json --qp-timeout 17 \
        "$@" >"probe-$n-$tag.json"
      lab_result "probe_${n}_${tag}_exit" $?
      /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("probe_%s_gbps=%.4f" % (sys.argv[2], (r.get("bandwidth_bytes_per_second") or 0) * 8e-9))
print("probe_%s_validated=%s" % (sys.argv[2], r.get("validated")))' "probe-$n-$tag.json" "${n}_$tag" \
        >>"$LAB_DIR/results" 2>/dev/null
    }
    for _ in 1 2 3; do probe unpaced --messages 500; done
    for _ in 1 2; do probe qps8 --qps 8 --tx-depth 16 --messages 480; done
    lab_netem loss 0.5%
    for _ in 1 2; do probe loss --messages 200 --timeout 30s; done
    lab_clear_faults
    lab_result probes_run "$n"
    lab_signal probes-done
    ;;
esac

lab_barrier probes-over 900
NODE_NAME=$LAB_NODE $bin run --config /tmp/trial.yaml >exporter.log 2>&1 &
exporter=$!
lab_barrier exporters-started
sleep "${TRIAL_EXPORTER_SECONDS:-60}"
lab_result exporter_bursts_ok "$(curl -sS --max-time 10 "$url/metrics" |
  awk '/^rdma_probe_runs_total\{.*result="success"/ {s += $2} END {print s + 0}')"
lab_barrier scraped
kill -TERM "$exporter"
wait "$exporter"
lab_result exporter_exit $?
