# Helpers shared by the bench/ scripts. Source it; it defines functions only.

# Prints a TCP port on 127.0.0.1 that no socket uses, below the ephemeral
# range (busy proxies hold thousands of ephemeral ports), best effort: the
# port could be taken between this check and its use.
free_port() {
    local port tries=0 low
    low=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    ((low > 12000)) || low=32768
    while ((tries < 200)); do
        port=$((10000 + RANDOM % (low - 10000)))
        if command -v ss >/dev/null; then
            if [[ -z $(ss -Htan "( sport = :$port )" 2>/dev/null) ]]; then
                echo "$port"
                return 0
            fi
        elif ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
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

# start_origin DIR PORT [HEADERS]: an nginx origin on 127.0.0.1:PORT (one
# worker, access log off) serving DIR/www: small.html (1400 B), large.bin
# (100 KiB) and a robots.txt that disallows only /private/. HEADERS are
# nginx directives added to its location (e.g. a Cache-Control header).
# Sets ORIGIN_PID; poll it with wait_for_status.
start_origin() {
    local dir=$1 port=$2 headers=${3:-}
    mkdir -p "$dir/www" "$dir/nginx-temp"
    head -c 1400 /dev/zero | tr '\0' 'a' >"$dir/www/small.html"
    head -c 102400 /dev/urandom >"$dir/www/large.bin"
    printf 'User-agent: *\nDisallow: /private/\nAllow: /\n' >"$dir/www/robots.txt"
    chmod -R a+rX "$dir/www"
    cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $dir/nginx-temp/body;
    proxy_temp_path $dir/nginx-temp/proxy;
    fastcgi_temp_path $dir/nginx-temp/fastcgi;
    uwsgi_temp_path $dir/nginx-temp/uwsgi;
    scgi_temp_path $dir/nginx-temp/scgi;
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    server {
        listen 127.0.0.1:$port;
        root $dir/www;
        location / { $headers }
        location = /nginx_status { stub_status; }
    }
}
EOF
    nginx -e "$dir/nginx-error.log" -p "$dir" -c "$dir/nginx.conf" &
    ORIGIN_PID=$!
}

# start_nginx_proxy DIR PORT ORIGIN_PORT [WORKERS]: the reference proxy, not
# a competitor: nginx as a plain HTTP proxy configured as a production
# forward path is (WORKERS worker processes, default 1; `keepalive 64`
# upstream pool, HTTP/1.1 with `Connection ""`, default response buffering),
# no checks at all. With NGINX_PROXY_CACHE=1 it caches responses
# (`proxy_cache` in DIR/cache, keys in a 16 MB zone): the reference for
# cache hits. Sets NGINX_PROXY_PID (the master; the workers are its
# children). Words after WORKERS wrap the command (e.g. valgrind ...); nginx
# then runs as one process, without a master (NGINX_PROXY_PID does the work).
start_nginx_proxy() {
    local dir=$1 port=$2 origin_port=$3 workers=${4:-1} cache_zone= cache=
    shift $(($# < 4 ? $# : 4))
    mkdir -p "$dir/temp"
    if [[ ${NGINX_PROXY_CACHE:-0} != 0 ]]; then
        cache_zone="proxy_cache_path $dir/cache keys_zone=hits:16m;"
        cache="proxy_cache hits;"
    fi
    cat >"$dir/nginx.conf" <<EOF
worker_processes $workers;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $dir/temp/body;
    proxy_temp_path $dir/temp/proxy;
    fastcgi_temp_path $dir/temp/fastcgi;
    uwsgi_temp_path $dir/temp/uwsgi;
    scgi_temp_path $dir/temp/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    upstream origin { server 127.0.0.1:$origin_port; keepalive 64; keepalive_requests 10000000; }
    $cache_zone
    server {
        listen 127.0.0.1:$port;
        location / {
            $cache
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
    local single=()
    # Under valgrind: one process, as its tools cannot reach a forked worker.
    (($# == 0)) || single=(-g 'master_process off;')
    "$@" nginx -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" "${single[@]}" &
    NGINX_PROXY_PID=$!
}

# Connections the nginx origin on 127.0.0.1:PORT has accepted so far.
origin_accepts() {
    curl -s -m 5 "http://127.0.0.1:$1/nginx_status" | awk 'NR == 3 { print $1 }'
}

# start_robots_proxy DIR PORT BINARY [EXTRA_TOML [ENV...]]: robots-proxy on
# 127.0.0.1:PORT, private destinations allowed, audit log in
# DIR/robots-proxy-audit.jsonl, logs at warn in DIR/robots-proxy.log;
# EXTRA_TOML is appended to its config; ENV (NAME=VALUE words) is added to
# its environment. Sets RP_PID; poll it with wait_for_status.
start_robots_proxy() {
    local dir=$1 port=$2 bin=$3 extra=${4:-}
    shift $(($# < 4 ? $# : 4))
    mkdir -p "$dir/robots-proxy-state"
    cat >"$dir/robots-proxy.toml" <<EOF
listen = "127.0.0.1:$port"
allow_private_destinations = true
state_dir = "$dir/robots-proxy-state"
audit.path = "$dir/robots-proxy-audit.jsonl"
log.level = "warn"
$extra
EOF
    env RUST_LOG=warn "$@" "$bin" run --config "$dir/robots-proxy.toml" 2>"$dir/robots-proxy.log" &
    RP_PID=$!
}
