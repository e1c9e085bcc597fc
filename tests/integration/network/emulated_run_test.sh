#!/usr/bin/env bash
# `strata run --hosts` on real emulated hosts (bench/network/emulated_hosts.sh: network
# namespaces joined by a bridge, a tbf limit on each link; needs root). Three hosts at 1 Gbit/s:
# the orchestrator on the head h0, the services spread over h1 and h2. Checked, each by a witness
# outside Strata where there is one:
#   - a stream job (2 replicas, TensAIR's mesh) and a switch job (ring all-reduce, then push/pull
#     through a server) both finish;
#   - the bytes the kernel counted on h1's and h2's links (tc's counters of their eth0 qdiscs)
#     grew by at least what the gradients of each run must have carried: the processes really
#     talked across the emulated links, not over a loopback of their own;
#   - the services listened on their hosts' addresses, and the run recorded that the worker on
#     another host than its server sent its tensors over TCP (the server's shared region is not
#     reachable from there) while the worker on the server's host used shared memory;
#   - `strata run --hosts` outside the head, and a malformed hosts file, are refused (exit 2)
#     before anything is launched.
# Seen failing on purpose: with stream_run.cc's replicas spawned without their hosts (no
# network namespace, listening on 127.0.0.1 in the head, the `launched` events still naming
# h1 and h2), the stream run still finished, and "h1 carried 0 bytes of the stream run's
# gradients" (h2 too) and "the replicas did not find each other at their hosts' addresses"
# failed.
# Skips (77) without root or namespaces, except under CI=true, where it fails.
# Usage: emulated_run_test.sh PATH_TO_strata
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/netns_test_lib.sh"
strata=${1:?usage: $0 PATH_TO_strata}
netns_test_begin r

work=$(mktemp -d /tmp/strata-netns-run-XXXXXX)
trap '"$hosts_sh" down; rm -rf "$work"' EXIT

# A CPU group per host (a whole core: the quota is not what is tested, only that the processes
# run in their host's group).
[[ -w /sys/fs/cgroup/cpu ]] || unavailable "no writable cgroup v1 cpu controller for the hosts' CPU groups"
"$hosts_sh" up 3 1gbit 100
"$hosts_sh" hosts-file >"$work/hosts.txt"

# CPU periods host H's group has been active in so far (cpu.stat): grows only while a process
# of the group runs.
periods() { awk '/^nr_periods/ {print $2}' "/sys/fs/cgroup/cpu/$STRATA_NET_PREFIX-h$1/cpu.stat"; }
# Bytes sent by host H's interface so far, as its tbf qdisc counted them.
sent() { tc -s -n "$STRATA_NET_PREFIX-h$1" qdisc show dev eth0 | awk '/Sent/ {print $2; exit}'; }
# The `launched` event of PROCESS in RUN's events.jsonl, its host field.
launched_on() {
  python3 - "$1/events.jsonl" "$2" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "launched" and e.get("process") == sys.argv[2]:
        print(e.get("host", "")); break
PY
}

# 1. Refused outside the head, and on a malformed file; nothing launched either time.
if out=$("$strata" run "$repo/configs/stream-fmnist.yaml" --hosts "$work/hosts.txt" \
  --out "$work/outside" 2>&1); then
  fail "strata run --hosts from the machine's own namespace succeeded"
else
  rc=$?
  [[ $rc -eq 2 ]] || fail "outside the head: exit $rc, not 2"
  grep -q "must run on the head host h0" <<<"$out" || fail "outside the head, the message: $out"
fi
[[ ! -e $work/outside ]] || fail "a refused run made its run directory"
{ head -2 "$work/hosts.txt"; echo "h1 /run/netns/$STRATA_NET_PREFIX-h1 not-an-address -"; } \
  >"$work/bad-hosts.txt"
if out=$("$hosts_sh" exec h0 "$strata" run "$repo/configs/stream-fmnist.yaml" \
  --hosts "$work/bad-hosts.txt" --out "$work/bad" 2>&1); then
  fail "a malformed hosts file was accepted"
else
  rc=$?
  [[ $rc -eq 2 ]] || fail "a malformed hosts file: exit $rc, not 2"
  grep -q "line 3: 'not-an-address' is not an IPv4 address" <<<"$out" ||
    fail "the malformed hosts file, the message: $out"
fi

# 2. A stream job: replica 0 on h1, replica 1 on h2, the broker's socket shared.
h1_before=$(sent 1)
h2_before=$(sent 2)
p1_before=$(periods 1)
p2_before=$(periods 2)
if ! "$hosts_sh" exec h0 "$strata" run "$repo/configs/stream-fmnist.yaml" --hosts "$work/hosts.txt" \
  --out "$work/stream" --quiet --set stream.max_events=8000 --set stream.produce.rate=0 \
  >"$work/stream.out" 2>&1; then
  fail "the stream run on emulated hosts"
  cat "$work/stream.out"
fi
# The replicas ran in their hosts' CPU groups: each group was busy for periods of its own.
[[ $(($(periods 1) - p1_before)) -ge 10 ]] || fail "h1's CPU group ran nothing of the stream run"
[[ $(($(periods 2) - p2_before)) -ge 10 ]] || fail "h2's CPU group ran nothing of the stream run"
h1_stream=$(($(sent 1) - h1_before))
h2_stream=$(($(sent 2) - h2_before))
# 8,000 events in windows of 64, a sum of 4 windows' gradients (the MLP's 235,146 floats,
# 940,584 bytes) sent to the other replica. The broker need not split the windows evenly, so each
# host's floor comes from its own replica's windows in summary.json: a full sum for every 4 of
# them (the last, partial one not counted), at least one; both together at least 14 sums. (A
# floor of 7 MB each once failed a run in which one host carried 6.9 MB, about 7 sums.)
for h in 1 2; do
  bytes=$((h == 1 ? h1_stream : h2_stream))
  windows=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['per_replica'][$((h - 1))]['windows'])" "$work/stream/summary.json")
  sums=$((windows / 4))
  [[ $sums -ge 1 ]] || fail "replica $((h - 1)) trained $windows windows: not one sum to send"
  [[ $bytes -ge $((sums * 940584)) ]] ||
    fail "h$h carried $bytes bytes of the stream run's gradients (its replica sent $sums sums of 940,584 bytes)"
  [[ $(launched_on "$work/stream" "worker-$((h - 1))") == "h$h" ]] ||
    fail "worker-$((h - 1)) was not launched on h$h"
done
[[ $((h1_stream + h2_stream)) -ge $((14 * 940584)) ]] ||
  fail "h1 and h2 carried $((h1_stream + h2_stream)) bytes of the stream run's gradients (expected >= 14 sums)"
python3 - "$work/stream/summary.json" <<'PY' || fail "the stream run's summary"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["events_trained"] == 8000, s["events_trained"]
assert s["apply_once"], "apply_once"
PY
grep -q "replicas at 10\.231\.0\.2:[0-9]*, 10\.231\.0\.3:[0-9]*" "$work/stream/logs/worker-0.log" ||
  fail "the replicas did not find each other at their hosts' addresses"

# 3. A switch job: ps-0 on h1, worker-0 on h2, worker-1 on h1; ring over TCP, then push/pull.
h2_before=$(sent 2)
if ! "$hosts_sh" exec h0 "$strata" run "$repo/configs/quickstart.yaml" --hosts "$work/hosts.txt" \
  --out "$work/switch" --quiet --set dataset.max_train=6000 --set training.epochs=2 \
  --set strategy.rule=at_fraction --set strategy.at_fraction=0.5 >"$work/switch.out" 2>&1; then
  fail "the switch run on emulated hosts"
  cat "$work/switch.out"
fi
h2_switch=$(($(sent 2) - h2_before))
# Epoch 1 in the ring: 24 steps, each sending the whole model (0.94 MB) from a rank of two; then
# epoch 2 pushing to the server: at least 10 MB in all.
[[ $h2_switch -ge 10000000 ]] || fail "h2 carried $h2_switch bytes of the switch run (expected >= 10 MB)"
python3 - "$work/switch" <<'PY' || fail "the switch run's record"
import json, sys
run = sys.argv[1]
s = json.load(open(f"{run}/summary.json"))
assert s["state"] == "succeeded", s["state"]
assert s["switch_epoch"] == 1, s["switch_epoch"]
hosts = {"ps-0": "10.231.0.2", "worker-0": "10.231.0.3", "worker-1": "10.231.0.2"}
seen = {}
for line in open(f"{run}/events.jsonl"):
    e = json.loads(line)
    if e.get("event") == "listening" and e.get("process") in hosts:
        seen[e["process"]] = e["address"].split(":")[0]
assert seen == hosts, seen
PY
# How each worker's tensors reached the server, as the run recorded it (`server_links`): worker-0
# on h2 over TCP (the region's socket is not in its namespace), worker-1 on the server's host h1
# through shared memory.
python3 - "$work/switch/events.jsonl" <<'PY' || fail "the server links the switch run recorded"
import json, sys
links = {}
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "server_links":
        links[e["process"]] = e["links"]
assert len(links.get("worker-0", [])) == 1 and "tcp (not on this host" in links["worker-0"][0], links
assert links.get("worker-1") == [links["worker-1"][0]] and links["worker-1"][0].endswith(": shared memory"), links
PY

"$hosts_sh" down
netns_test_end
