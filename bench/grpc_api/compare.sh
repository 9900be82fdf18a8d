#!/usr/bin/env bash
# gRPC's own CPU per unary call, server on the callback API against the
# completion-queue API with 1, 2 and 4 threads, and with 4 threads beside a
# callback-API service (gRPC's health service, as in fuseserve's server);
# grpc_api_cpu.cc says what is measured. Each configuration: a fresh server,
# a 1 s warm-up, SECONDS measured. GRPC_API_CONFIGS="cq 4;cq+health 4" picks
# configurations (";"-separated).
#   bench/grpc_api/compare.sh BUILD_DIR/bench/grpc_api/grpc_api_cpu [CONCURRENCY] [BYTES] [SECONDS]
set -euo pipefail
bin=$1
concurrency=${2:-64}
bytes=${3:-32768}
seconds=${4:-5}
port=${GRPC_API_PORT:-19555}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "concurrency $concurrency, $bytes-byte requests and answers, ${seconds} s, host CPUs $(nproc)"
printf '%-14s %10s %18s %18s\n' server rpc/s "server us/rpc" "client us/rpc"
IFS=';' read -r -a configs <<< "${GRPC_API_CONFIGS:-callback;cq 1;cq 2;cq 4;cq+health 4}"
for config in "${configs[@]}"; do
  read -r api threads <<< "$config"
  "$bin" server "$api" "$port" ${threads:+"$threads"} > "$log" &
  server=$!
  sleep 0.5
  "$bin" client "127.0.0.1:$port" "$concurrency" "$seconds" "$bytes" > "$log.client" &
  client=$!
  sleep 1.5  # past the client's warm-up
  first=$(tail -1 "$log")
  sleep "$(python3 -c "print($seconds - 1)")"
  last=$(tail -1 "$log")
  wait "$client"
  kill -TERM "$server"
  wait "$server" || true
  read -r rate client_us < "$log.client"
  read -r cpu0 n0 <<< "$first"
  read -r cpu1 n1 <<< "$last"
  server_us=$(python3 -c "print('%.1f' % (1e6 * ($cpu1 - $cpu0) / max(1, $n1 - $n0)))")
  printf '%-14s %10s %18s %18s\n' "$config" "$rate" "$server_us" "$client_us"
  rm -f "$log.client"
done
