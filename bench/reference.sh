#!/usr/bin/env bash
# Reference timings for the provisioning benchmark: what initdb, pg_ctl start and CREATE DATABASE cost on
# this machine by themselves, outside the appliance. Run as root (the commands run as the postgres OS
# user, as the appliance runs them) or as the postgres user:
#
#   bash bench/reference.sh [runs]        # default 5 runs of each, prints the median and every run
#
# It works in a temp dir of its own and removes it. The port (default 54329, env REF_PORT) must be free.
set -euo pipefail

runs=${1:-5}
port=${REF_PORT:-54329}
bin=${PGBIN:-/usr/lib/postgresql/15/bin}
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
now_ms() { date +%s%N | awk '{ printf "%.1f", $1 / 1e6 }'; }

tmp=$(mktemp -d /tmp/pgref.XXXXXX)
chmod 0711 "$tmp"
[ "$(id -u)" = 0 ] && chown postgres "$tmp"
cleanup() {
	as_pg "$bin/pg_ctl" stop -D "$tmp/start" -m immediate >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
echo "appliance-pw" >"$tmp/pw"
chmod 0600 "$tmp/pw"
[ "$(id -u)" = 0 ] && chown postgres "$tmp/pw"

median() { sort -n | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.1f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# time_runs NAME COMMAND [UNTIMED]: runs COMMAND $runs times (with $i set), each followed by UNTIMED
# outside the clock; prints the median and the runs in ms.
time_runs() {
	local name=$1 cmd=$2 after=${3:-}
	local all=()
	for i in $(seq 1 "$runs"); do
		local t0 t1
		t0=$(now_ms)
		eval "$cmd"
		t1=$(now_ms)
		eval "$after"
		all+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')")
	done
	printf '%-52s median %7s ms   runs: %s\n' "$name" "$(printf '%s\n' "${all[@]}" | median)" "${all[*]}"
}

echo "machine: $(nproc) CPUs, kernel $(uname -r), $("$bin/postgres" --version), load $(cut -d' ' -f1-3 /proc/loadavg)"

flags=(-U appliance_admin --pwfile="$tmp/pw" -A scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 --no-instructions)
time_runs "initdb (the appliance's flags, with --data-checksums)" \
	'as_pg "$bin/initdb" -D "$tmp/i$i" "${flags[@]}" --data-checksums >/dev/null'
time_runs "initdb, same flags, --no-sync (skips the final fsync)" \
	'as_pg "$bin/initdb" -D "$tmp/n$i" "${flags[@]}" --data-checksums --no-sync >/dev/null'

# A prepared cluster for the start and SQL timings: TCP on 127.0.0.1 plus a socket in the temp dir.
as_pg "$bin/initdb" -D "$tmp/start" -U appliance_admin -A trust --encoding=UTF8 --locale=C.UTF-8 \
	--data-checksums --no-instructions >/dev/null
cat >>"$tmp/start/postgresql.conf" <<EOF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp'
shared_preload_libraries = 'pg_stat_statements'
wal_level = replica
logging_collector = on
EOF
mkfifo "$tmp/fifo"
exec 9<>"$tmp/fifo" # read -t 0.001 on it is a 1 ms sleep without starting a process
stop() { as_pg "$bin/pg_ctl" stop -D "$tmp/start" -m fast -w >/dev/null; }
time_runs "pg_ctl start -w (prepared cluster; pg_ctl polls every 100 ms)" \
	'as_pg "$bin/pg_ctl" start -w -D "$tmp/start" -l "$tmp/start.log" >/dev/null' stop
# The postmaster itself: launch without -w, then watch postmaster.pid for "ready" every millisecond.
time_runs "postmaster ready (postmaster.pid says ready, 1 ms poll)" \
	'as_pg "$bin/pg_ctl" start -D "$tmp/start" -l "$tmp/start.log" >/dev/null;
	 until { mapfile -t l <"$tmp/start/postmaster.pid"; [[ ${l[7]:-} == ready* ]]; } 2>/dev/null; do read -t 0.001 -u 9 || true; done' stop
as_pg "$bin/pg_ctl" start -w -D "$tmp/start" -l "$tmp/start.log" >/dev/null
psql_() { as_pg "$bin/psql" -X -q -h "$tmp" -p "$port" -U appliance_admin -d postgres -v ON_ERROR_STOP=1 "$@"; }
time_runs "psql connect + SELECT 1 (unix socket, trust)" 'psql_ -c "SELECT 1" >/dev/null'
time_runs "CREATE DATABASE (PostgreSQL 15: WAL_LOG strategy)" 'psql_ -c "CREATE DATABASE ref$i" >/dev/null'
time_runs "CREATE ROLE + CREATE DATABASE + CREATE EXTENSION" \
	'psql_ -c "CREATE ROLE r$i LOGIN" -c "CREATE DATABASE x$i OWNER r$i" >/dev/null;
	 psql_ -d "x$i" -c "CREATE EXTENSION pg_stat_statements" >/dev/null'
echo "fsync latency of the file system under /tmp (pg_test_fsync, 1 s per method):"
as_pg "$bin/pg_test_fsync" -s 1 -f "$tmp/fsync.test" 2>/dev/null | grep -E '^\s+(fdatasync|fsync|open_datasync) ' | sed 's/^ */  /'
