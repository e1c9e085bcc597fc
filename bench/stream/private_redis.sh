# Sourced by the stream benchmarks: start_private_redis DIR starts a redis-server that listens only
# on DIR/redis.sock (no TCP port, nothing saved to disk), sets redis_pid and returns once it
# answers. The caller stops it (kill "$redis_pid") in its own cleanup.
start_private_redis() {
  redis-server --port 0 --unixsocket "$1/redis.sock" --unixsocketperm 700 --save "" \
    --appendonly no --dir "$1" --logfile "$1/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do redis-cli -s "$1/redis.sock" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis-server did not answer on $1/redis.sock" >&2
  return 1
}
