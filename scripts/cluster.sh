#!/usr/bin/env bash
# A private Slurm (with accounting) and optionally a Ray head, for the `cluster` tests and for trying
# the executors: scripts/cluster.sh start [--ray] [--nodes N] | stop | status | env
#
# --nodes N (N > 1): N Slurm nodes n0..n(N-1) on this one machine, one slurmd each (`slurmd -N nI`,
# each on its own port from $PORT + 3, the machine's CPUs shared out), so a job can ask for
# --nodes N: multi-node cells run for real on one machine. Default: one node named after the host.
#
# Everything lives in $BENCHBENCH_CLUSTER_DIR (default /tmp/benchbench-cluster): configuration, state,
# logs, and one pid file per daemon. Daemons start in the order Slurm needs (munged, MariaDB, slurmdbd,
# slurmctld, slurmd) on ports of their own (Slurm 16817-16819, MariaDB 13306, Ray 26379; with
# BENCHBENCH_CLUSTER_PORT=P, Slurm P..P+2 (nodes from P+3) and MariaDB P-3511, for a second cluster
# beside the first, e.g. the multi-node test's beside the session's), and are
# stopped by the PIDs recorded here, never by name: other Slurm or Ray processes on the machine are
# left alone. A stopped daemon may linger as a zombie (PID 1 of a container may not reap it), so
# "alive" means a /proc/PID/stat whose state is not Z. Needs root (slurmd runs jobs as their user).
# Clients need `export SLURM_CONF=$DIR/slurm.conf` (printed by `env`); Ray's address is in $DIR/ray.address.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${BENCHBENCH_CLUSTER_DIR:-/tmp/benchbench-cluster}
PY=${PYTHON:-$REPO/.venv/bin/python}
NODE=$(hostname -s)
NODES=1
PORT=${BENCHBENCH_CLUSTER_PORT:-16817}  # slurmctld; slurmd +1, slurmdbd +2, nodes n0.. +3..
DB_PORT=$((PORT - 3511))  # MariaDB: 13306 by default
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd ray)  # slurmd: one pid file per node (slurmd, slurmd-nI)

alive() {  # alive PID: running and not a zombie
  local state
  [ -r "/proc/$1/stat" ] || return 1
  state=$(sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f1)
  [ "$state" != Z ] && [ "$state" != X ]
}

pid_of() { [ -s "$DIR/pids/$1" ] && cat "$DIR/pids/$1"; }

running() { local pid; pid=$(pid_of "$1") && alive "$pid"; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "cluster: $what not ready after ${deadline}s; logs in $DIR/log" >&2
      return 1
    fi
    sleep 0.2
  done
}

node_lines() {  # the NodeName lines: this host, or NODES nodes sharing it out
  local cpus=$1 mem=$2 i
  if [ "$NODES" -le 1 ]; then
    echo "NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    return
  fi
  for ((i=0; i<NODES; i++)); do
    echo "NodeName=n$i NodeHostname=$NODE NodeAddr=127.0.0.1 Port=$((PORT + 3 + i)) CPUs=$(( cpus / NODES > 0 ? cpus / NODES : 1 )) RealMemory=$(( mem / NODES )) State=UNKNOWN"
  done
}

write_config() {
  local mem cpus
  cpus=$(nproc)
  mem=$(( $(free -m | awk '/^Mem:/{print $2}') - 2048 ))
  cat > "$DIR/slurm.conf" <<EOF
ClusterName=benchbench
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/slurm/state
SlurmdSpoolDir=$DIR/slurm/spool-%n
SlurmctldPidFile=$DIR/slurm/slurmctld.pid
SlurmdPidFile=$DIR/slurm/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MailProg=/bin/true
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((PORT + 2))
AccountingStoragePass=$DIR/munge/munge.socket
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerParameters=sched_interval=1,bf_interval=1
KillWait=2
# A loaded machine (CI, shared hosts) answers slowly: do not mark the node down for that.
MessageTimeout=60
SlurmdTimeout=600
MinJobAge=300
InactiveLimit=0
$(node_lines "$cpus" "$mem")
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat > "$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 2))
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=benchbench
StorageLoc=slurm_acct_db
PidFile=$DIR/slurm/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
EOF
  chmod 600 "$DIR/slurmdbd.conf"
}

start_munge() {
  running munged && return
  install -d -o munge -g munge -m 755 "$DIR/munge"
  install -o munge -g munge -m 400 /etc/munge/munge.key "$DIR/munge/munge.key"
  runuser -u munge -- munged --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/seed"
  wait_for 10 munged test -s "$DIR/munge/munged.pid"
  cp "$DIR/munge/munged.pid" "$DIR/pids/munged"
}

mysql_cli() { mariadb --protocol=socket -S "$DIR/mysql/mysqld.sock" -uroot "$@"; }

start_mariadb() {
  running mariadbd && return
  install -d -o mysql -g mysql "$DIR/mysql"
  if [ ! -d "$DIR/mysql/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$DIR/mysql" --auth-root-authentication-method=socket \
      --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1
  fi
  setsid mariadbd --no-defaults --user=mysql --datadir="$DIR/mysql" --socket="$DIR/mysql/mysqld.sock" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$DIR/mysql/mariadb.pid" \
    --log-error="$DIR/log/mariadb.log" --innodb-buffer-pool-size=32M </dev/null >/dev/null 2>&1 &
  echo $! > "$DIR/pids/mariadbd"
  wait_for 60 mariadb mysql_cli -e "select 1"
  mysql_cli -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'benchbench';
                CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'benchbench';
                GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
                GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_daemon() {  # start_daemon NAME COMMAND...: in the foreground (-D) of its own session, pid recorded
  local name=$1
  shift
  running "$name" && return
  setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
  echo $! > "$DIR/pids/$name"
}

start_ray() {
  running ray && return
  RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled setsid "$REPO/.venv/bin/ray" start --head --block \
    --node-ip-address=127.0.0.1 --port=26379 --num-cpus="$(nproc)" --include-dashboard=false \
    --object-store-memory=200000000 --temp-dir="$DIR/ray" --disable-usage-stats \
    </dev/null >>"$DIR/log/ray.out" 2>&1 &
  echo $! > "$DIR/pids/ray"
  echo "127.0.0.1:26379" > "$DIR/ray.address"
  wait_for 90 "the Ray head" bash -c "exec 3<>/dev/tcp/127.0.0.1/26379"
}

start() {
  local ray=0 i
  while [ $# -gt 0 ]; do
    case "$1" in
      --ray) ray=1 ;;
      --nodes) NODES=${2:?--nodes needs a number}; shift ;;
      --nodes=*) NODES=${1#--nodes=} ;;
      *) echo "cluster: unknown option $1; usage: $0 start [--ray] [--nodes N]" >&2; exit 2 ;;
    esac
    shift
  done
  case "$NODES" in ''|*[!0-9]*|0) echo "cluster: --nodes $NODES: expected a whole number >= 1" >&2; exit 2 ;; esac
  mkdir -p "$DIR/pids" "$DIR/log" "$DIR/slurm/state"
  chmod 755 "$DIR"
  write_config
  export SLURM_CONF=$DIR/slurm.conf
  start_munge
  start_mariadb
  start_daemon slurmdbd slurmdbd -D  # reads slurmdbd.conf beside $SLURM_CONF
  wait_for 30 slurmdbd bash -c "exec 3<>/dev/tcp/127.0.0.1/$((PORT + 2))"
  start_daemon slurmctld slurmctld -D -i -f "$DIR/slurm.conf"
  wait_for 30 slurmctld scontrol ping
  if [ "$NODES" -le 1 ]; then
    mkdir -p "$DIR/slurm/spool-$NODE"
    start_daemon slurmd slurmd -D -f "$DIR/slurm.conf"
  else
    for ((i=0; i<NODES; i++)); do
      mkdir -p "$DIR/slurm/spool-n$i"
      start_daemon "slurmd-n$i" slurmd -D -N "n$i" -f "$DIR/slurm.conf"
    done
  fi
  # A node marked down earlier (e.g. it stopped answering under load) comes back.
  if sinfo -h -o %t | grep -q down; then scontrol update NodeName="$(sinfo -h -o %N)" State=RESUME || true; fi
  wait_for 30 "the nodes" bash -c "[ \$(sinfo -h -N -o %t | grep -cE '^(idle|mix|alloc)') -ge $NODES ]"
  wait_for 30 "accounting" sacct -X -n -j 1
  timeout 60 srun -t 1 -N "$NODES" true  # the first job waits a moment; after it the cluster is ready
  if [ $ray = 1 ]; then start_ray; fi
  echo "cluster: up in $DIR (export SLURM_CONF=$DIR/slurm.conf)"
}

daemons() {  # the daemons started here, in start order (slurmd: each node's)
  local name f
  for name in "${DAEMONS[@]}"; do
    if [ "$name" = slurmd ]; then
      for f in "$DIR"/pids/slurmd "$DIR"/pids/slurmd-*; do [ -e "$f" ] && basename "$f"; done
      [ -e "$DIR/pids/slurmd" ] || ls "$DIR"/pids/slurmd-* >/dev/null 2>&1 || echo slurmd
    else
      echo "$name"
    fi
  done
}

stop() {
  local name pid i names
  mapfile -t names < <(daemons)
  for ((i=${#names[@]}-1; i>=0; i--)); do
    name=${names[i]}
    pid=$(pid_of "$name") || continue
    if alive "$pid"; then
      # Ray's head runs in its own session: signal the group, so its workers go too.
      if [ "$name" = ray ]; then kill -TERM -- "-$pid" 2>/dev/null || true; else kill -TERM "$pid" 2>/dev/null || true; fi
      for _ in $(seq 50); do alive "$pid" || break; sleep 0.2; done
      if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$DIR/pids/$name"
  done
  echo "cluster: stopped"
}

status() {
  local name pid rc=0
  for name in $(daemons); do
    if pid=$(pid_of "$name"); then
      if alive "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: not running (pid $pid gone)"; rc=1; fi
    else
      [ "$name" = ray ] || { echo "$name: not started"; rc=1; }
    fi
  done
  return $rc
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$DIR/slurm.conf" ;;
  *) echo "usage: $0 start [--ray] [--nodes N] | stop | status | env" >&2; exit 2 ;;
esac
