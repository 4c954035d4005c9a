# bench/collector/nginx_lab.sh — sourced by close_capture.sh and close_vs_poll.sh: a real nginx in
# a server network namespace and a client namespace, joined by two veth pairs — one plain
# (10.<net>.1.0/24) and one through a 50 Mbit/s tbf bottleneck (10.<net>.2.0/24) — serving files
# of 1 KiB … 1 MiB. Needs root, ip, tc and nginx (the callers check and skip).
#
#   nginx_lab_up NAME NET [NGINX_HTTP_DIRECTIVES [SERVER_CC]]
#     sets $tmp (a temp dir: nginx's files, anything else the caller builds), $srv and $cli (the
#     namespaces), $pids (the caller's background processes, killed at exit) and an EXIT trap
#     that stops nginx, deletes the namespaces and $tmp. Serves $tmp/nginx/www (add files before
#     or after) on 10.NET.1.1:80 and 10.NET.2.1:80 (the bottlenecked path). SERVER_CC: the
#     server namespace's congestion control, set before nginx listens (its sockets inherit it).

nginx_lab_up() {
  local name=$1 net=$2 directives=${3:-} server_cc=${4:-}
  local a="${name}f$$" b="${name}t$$" ca="${name}cf$$" cb="${name}ct$$"
  tmp=$(mktemp -d)
  srv="${name}-srv-$$"
  cli="${name}-cli-$$"
  pids=()
  trap nginx_lab_down EXIT
  ip netns add "$srv"
  ip netns add "$cli"
  ip -n "$srv" link set lo up
  ip -n "$cli" link set lo up
  ip -n "$srv" link add "$a" type veth peer name "$ca" netns "$cli"
  ip -n "$srv" link add "$b" type veth peer name "$cb" netns "$cli"
  ip -n "$srv" addr add "10.$net.1.1/24" dev "$a"
  ip -n "$cli" addr add "10.$net.1.2/24" dev "$ca"
  ip -n "$srv" addr add "10.$net.2.1/24" dev "$b"
  ip -n "$cli" addr add "10.$net.2.2/24" dev "$cb"
  for d in "$a" "$b"; do ip -n "$srv" link set "$d" up; done
  for d in "$ca" "$cb"; do ip -n "$cli" link set "$d" up; done
  tc -n "$srv" qdisc add dev "$b" root tbf rate 50mbit burst 16k limit 30000
  ip netns exec "$cli" sysctl -q -w net.ipv4.ip_local_port_range="1024 65535"
  [ -z "$server_cc" ] || ip netns exec "$srv" sysctl -q -w net.ipv4.tcp_congestion_control="$server_cc"

  mkdir -p "$tmp/nginx/www"
  for s in 1024 4096 16384 65536 262144 1048576; do head -c "$s" /dev/urandom >"$tmp/nginx/www/$s"; done
  cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
user root;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fastcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;
    sendfile on;
    $directives
    keepalive_timeout 10;
    default_type application/octet-stream;
    server {
        listen 10.$net.1.1:80 backlog=1024;
        listen 10.$net.2.1:80 backlog=1024;
        root $tmp/nginx/www;
    }
}
EOF
  ip netns exec "$srv" nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf"
  for _ in $(seq 50); do [ -s "$tmp/nginx/nginx.pid" ] && break; sleep 0.1; done
}

nginx_lab_down() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$tmp/nginx/nginx.pid" ] && kill "$(cat "$tmp/nginx/nginx.pid")" 2>/dev/null || true
  ip netns delete "$srv" 2>/dev/null || true
  ip netns delete "$cli" 2>/dev/null || true
  rm -rf "$tmp"
}
