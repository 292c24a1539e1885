#!/usr/bin/env bash
# Runs softib's benchmarks and the baselines they are compared against, in
# the same run on the same machine, and writes the raw output to
# bench-results/. BENCHMARKS.md quotes these figures with their ratios.
#
#   bash scripts/bench.sh            # full run (~10 min on 2 cores)
#   BENCHTIME=1s bash scripts/bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
bt=${BENCHTIME:-2s}
mkdir -p bench-results
out=bench-results/$(date -u +%Y%m%dT%H%M%SZ).txt
exec > >(tee "$out") 2>&1

if ! command -v fi_pingpong >/dev/null && [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfabric-bin >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfabric-bin >/dev/null; }
fi

echo "# softib benchmarks $(date -u +%FT%TZ) on $(nproc) cores, $(go version | cut -d' ' -f3)"
load() { echo "# loadavg: $(cut -d' ' -f1-3 /proc/loadavg)"; }
gobench() { # pkg regexp
  load
  go test -run '^$' -bench "$2" -benchtime "$bt" -benchmem -count 1 "$1" 2>&1 | grep -E '^(Benchmark|ok|FAIL|---)'
}

echo "## RoCE data path (rxe) vs raw UDP"
gobench ./rxe 'BenchmarkRCWrite|BenchmarkRCSendPingPong|BenchmarkUDPPingPong'
gobench ./udp 'BenchmarkRawUDP64K|BenchmarkRawPingPong8B|BenchmarkPingPong8B|BenchmarkSocket4K'
echo "## wire"
gobench ./wire/roce 'BenchmarkICRC4096|BenchmarkParse|BenchmarkBuild'
echo "## RDMA CM"
gobench ./rdmacm 'BenchmarkConnect'
echo "## LNet"
gobench ./lnet 'BenchmarkPut|BenchmarkGet|BenchmarkPing'
gobench ./lnet/socklnd 'BenchmarkSocklndPut1M$|BenchmarkRawTCP1M|BenchmarkSocklndPut0'
gobench ./lnet/o2iblnd 'BenchmarkO2ibPut1M|BenchmarkRCWrite1M'
gobench ./lnet/selftest 'BenchmarkBRW'

echo "## libfabric tcp provider (Debian libfabric-bin), fi_pingpong on loopback"
if command -v fi_pingpong >/dev/null; then
  for size in 65536 1048576; do
    load
    FI_TCP_IFACE=lo fi_pingpong -p tcp -e msg -d lo -S $size -I 2000 >/tmp/fi_srv.$$ 2>&1 &
    srv=$!
    sleep 1
    FI_TCP_IFACE=lo timeout 120 fi_pingpong -p tcp -e msg -d lo -S $size -I 2000 127.0.0.1 2>&1 | tail -2
    wait $srv 2>/dev/null
  done
else
  echo "fi_pingpong not installed (apt-get install libfabric-bin)"
fi
load
echo "# raw output: $out"
