#!/usr/bin/env bash
# bench/lib/profile.sh: where robots-proxy spends its CPU under wrk load.
#
# Starts the nginx origin of bench/compare and robots-proxy, warms the
# robots.txt cache, then runs wrk against an allowed path while `perf record`
# samples the proxy (cpu-clock, DWARF call graphs), and prints the top
# functions by self time and by inclusive time.
#
# Symbols and call graphs need debug line tables; build a binary for it
# once (a separate target dir, so the normal release build is untouched):
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_PROFILE_RELEASE_STRIP=none \
#     cargo build --release --target-dir target/profiling
#   bench/lib/profile.sh target/profiling/release/robots-proxy
# Knobs: DURATION=10 CONNS=32 SIZE=small|large OUT=perf.data TOP=40
#        RP_EXTRA_TOML (appended to the proxy's config)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIB=$ROOT/bench/lib
# shellcheck source=bench/lib/common.sh
source "$LIB/common.sh"
export PATH=$PATH:/usr/sbin:/sbin

BIN=${1:-$ROOT/target/profiling/release/robots-proxy}
DURATION=${DURATION:-10}
CONNS=${CONNS:-32}
SIZE=${SIZE:-small}
TOP=${TOP:-40}
OUT=${OUT:-$ROOT/target/profiling/perf.data}
for tool in nginx wrk perf curl; do
    command -v "$tool" >/dev/null || {
        echo "needs $tool (apt-get install nginx wrk linux-perf curl)" >&2
        exit 1
    }
done
[[ -x $BIN ]] || {
    echo "no $BIN: see the build line at the top of this script" >&2
    exit 1
}
ulimit -n 65536 2>/dev/null || true

TMP=$(mktemp -d /tmp/robots-proxy-profile.XXXXXX)
chmod 755 "$TMP"
PIDS=()
cleanup() {
    local status=$? pid
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do stop_pid "$pid" 10; done
    rm -rf "$TMP"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

origin_port=$(free_port)
start_origin "$TMP" "$origin_port"
PIDS+=("$ORIGIN_PID")
wait_for_status nginx 200 "http://127.0.0.1:$origin_port/small.html"
proxy_port=$(free_port)
start_robots_proxy "$TMP" "$proxy_port" "$BIN" "${RP_EXTRA_TOML:-}"
PIDS+=("$RP_PID")
case $SIZE in
small) path=/small.html ;;
large) path=/large.bin ;;
*) echo "SIZE is small or large" >&2; exit 1 ;;
esac
url=http://127.0.0.1:$origin_port$path
wait_for_status robots-proxy 200 -x "http://127.0.0.1:$proxy_port" "$url"

BENCH_URL=$url BENCH_MODE=proxy wrk -t1 -c"$CONNS" -d2s -s "$LIB/wrk-url.lua" \
    "http://127.0.0.1:$proxy_port" >/dev/null
mkdir -p "$(dirname "$OUT")"
perf record -q -e cpu-clock -F 499 --call-graph dwarf,16384 -p "$RP_PID" -o "$OUT" \
    -- sleep "$DURATION" 2>"$TMP/perf-record.log" &
perf_pid=$!
BENCH_URL=$url BENCH_MODE=proxy wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$LIB/wrk-url.lua" \
    "http://127.0.0.1:$proxy_port" | grep RESULT
wait "$perf_pid" || true

echo
echo "== self time, top $TOP =="
perf report -i "$OUT" --no-children --stdio --sort dso -g none 2>/dev/null |
    grep -v '^#' | grep -v '^$' | sed 's/ *$//' | head -n 6
perf report -i "$OUT" --no-children --stdio --sort symbol -g none --percent-limit 0.4 2>/dev/null |
    grep -v '^#' | grep -v '^$' | sed 's/[ -]*$//' | cut -c1-160 | head -n "$TOP"
echo
echo "== inclusive time, top $TOP =="
# Only named functions of the proxy and the syscalls, not the many inlined
# poll wrappers.
perf report -i "$OUT" --children --stdio --sort symbol -g none --percent-limit 1 2>/dev/null |
    grep -v '^#' | grep -v '^$' | sed 's/[ -]*$//' |
    grep -E 'robots_proxy::|hyper_util::client::legacy::client::Client|__GI___writev|__libc_recv|epoll_wait|futex|malloc|free|fmt::write' |
    grep -vE 'poll<|poll_inner|call_once|catch_unwind|do_call|with_mut|poll_future|\{closure#' |
    cut -c1-160 | head -n "$TOP"
echo
echo "perf data: $OUT (perf report -i $OUT)"
