#!/bin/bash
# brw-vs-tcp.sh: lst brw 1 MiB over o2ib against the same over tcp, in one
# run, between two `softib lnetd` processes, each with a tcp and an o2ib NI
# on one address: on loopback (127.77.0.1/.2: RoCE MTU 4096) or in two
# network namespaces joined by a 1500-MTU veth pair (RoCE MTU 1024).
# Prints, per test, lst's MiB/s, the CPU time (user+sys) of both lnetd
# processes per MiB moved, and the load average (the machine is shared:
# compare CPU per MiB and same-run ratios, not single throughputs).
# BENCHMARKS.md's "LNet over o2ib against tcp" rows come from it. Root.
#
# usage: brw-vs-tcp.sh lo|ns SOFTIB_BINARY [concurrency 8] [seconds 5] [conns_per_peer 1] [tests]
#   tests: NET:OP pairs, default "tcp:write o2ib:write tcp:read o2ib:read"
#   PERF=1 also records `perf record -g` of both lnetds per test (in the
#   printed work directory; perf report -i ... --no-children).
set -eu
MODE=$1 BIN=$2 CONC=${3:-8} SECS=${4:-5} CPP=${5:-1}
TESTS=${6:-"tcp:write o2ib:write tcp:read o2ib:read"}
W=$(mktemp -d /tmp/brw-vs-tcp.XXXXXX)
if [ "$MODE" = lo ]; then
	A=127.77.0.1 B=127.77.0.2 PA="" PB=""
else
	A=10.77.0.1 B=10.77.0.2 NA=brwtcpA$$ NB=brwtcpB$$
	ip netns add $NA; ip netns add $NB
	trap 'ip netns del $NA; ip netns del $NB' EXIT
	ip link add v$$a netns $NA type veth peer name v$$b netns $NB
	ip -n $NA addr add $A/24 dev v$$a; ip -n $NB addr add $B/24 dev v$$b
	ip -n $NA link set v$$a mtu 1500 up; ip -n $NB link set v$$b mtu 1500 up
	ip -n $NA link set lo up; ip -n $NB link set lo up
	PA="ip netns exec $NA" PB="ip netns exec $NB"
fi
cfg() {
	cat <<Y
net:
    - net type: tcp
      local NI(s):
        - interfaces:
              0: $1
    - net type: o2ib
      local NI(s):
        - interfaces:
              0: $1
          lnd tunables:
              conns_per_peer: $CPP
global:
    accept_port: 21990
    discovery: 0
Y
}
cfg $A >$W/a.yaml
cfg $B >$W/b.yaml
$PA $BIN lnetd --config $W/a.yaml --socket $W/a.sock >$W/a.log 2>&1 &
PIDA=$!
$PB $BIN lnetd --config $W/b.yaml --socket $W/b.sock >$W/b.log 2>&1 &
PIDB=$!
for _ in $(seq 100); do
	grep -q "lnetd: ready" $W/a.log 2>/dev/null && grep -q "lnetd: ready" $W/b.log 2>/dev/null && break
	sleep 0.2
done
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
HZ=$(getconf CLK_TCK)
echo "# $MODE, concurrency $CONC, ${SECS}s per test, o2ib conns_per_peer $CPP, $(nproc) CPUs"
for t in $TESTS; do
	net=${t%%:*} op=${t#*:}
	ca=$(cpu $PIDA) cb=$(cpu $PIDB)
	if [ "${PERF:-0}" = 1 ]; then
		perf record -F 497 -g -p $PIDA,$PIDB -o $W/perf.$net.$op.data -- sleep $((SECS + 1)) >/dev/null 2>&1 &
		PP=$!
	fi
	out=$($PA $BIN lst quick --force --socket $W/a.sock --from $A@$net --to $B@$net --concurrency $CONC \
		--seconds $SECS --delay 1 --json brw $op size=1M check=simple 2>>$W/lst.err) || true
	[ "${PERF:-0}" = 1 ] && wait $PP
	da=$(($(cpu $PIDA) - ca)) db=$(($(cpu $PIDB) - cb))
	python3 - "$out" $da $db $HZ $net $op "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
r = json.loads(sys.argv[1]) if sys.argv[1] else {}
da, db, hz = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rate = r.get("mib_per_s", 0)
mib = max(rate * r.get("seconds", 0), 1e-9)
print("%-5s %-5s %7.0f MiB/s  errors %d  CPU ms/MiB: client %.2f server %.2f total %.2f  load %s" % (
    sys.argv[5], sys.argv[6], rate, r.get("errors", -1), da * 1e3 / hz / mib, db * 1e3 / hz / mib,
    (da + db) * 1e3 / hz / mib, sys.argv[7]))
PY
done
kill $PIDA $PIDB
wait $PIDA $PIDB 2>/dev/null || true
echo "# work directory $W"
