# The leaks scenario (leaks.sh) in short, for every test run: 20 successful bursts, 20 that fail
# because node1's RoCE packets are dropped mid-schedule (the peer stops answering: each burst
# ends in wc_retry_exceeded or timeout within the configured timeout, and the session is rebuilt
# once the drop clears), then node1's port down (port_down, never a hang) and up again.
LEAKS_SUCCESSES=20
LEAKS_FAILURES=20
# shellcheck source=leaks.sh
source /mnt/scenarios/leaks.sh
