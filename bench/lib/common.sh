# Helpers shared by the bench/ scripts. Source it; it defines functions only.

# Prints a TCP port on 127.0.0.1 that nothing listens on (best effort: the
# port could be taken between this check and its use).
free_port() {
    local port tries=0
    while ((tries < 200)); do
        port=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
        tries=$((tries + 1))
    done
    echo "no free port found" >&2
    return 1
}

# wait_for_status DESCRIPTION EXPECTED_STATUS CURL_ARGS...: polls with curl
# for up to 15 s until the answer has EXPECTED_STATUS.
wait_for_status() {
    local what=$1 want=$2 got i
    shift 2
    for ((i = 0; i < 150; i++)); do
        got=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$@" 2>/dev/null || true)
        if [[ $got == "$want" ]]; then
            return 0
        fi
        sleep 0.1
    done
    echo "$what did not answer $want (last answer: ${got:-none})" >&2
    return 1
}

# Stops the given pids: SIGTERM, then up to $2 seconds' wait, then SIGKILL.
stop_pid() {
    local pid=$1 limit=${2:-10} i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < limit * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "pid $pid still running after ${limit}s: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# A /proc/PID/status field in KiB (VmRSS, VmHWM); 0 if unreadable.
proc_kib() {
    local pid=$1 field=$2
    awk -v f="$field:" '$1 == f { print $2; found = 1 } END { if (!found) print 0 }' \
        "/proc/$pid/status" 2>/dev/null || echo 0
}

# Median of the numbers on stdin (one per line); the mean of the two middle
# values for an even count.
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
