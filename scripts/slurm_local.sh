#!/bin/bash
# slurm_local.sh — install and start a single-node Slurm "cluster" on this machine, to try the
# job-array + merge workflow of docs/CLUSTER.md without a real cluster.
#
# Usage (as root, Debian/Ubuntu):
#   scripts/slurm_local.sh          install if needed, configure, start munged/slurmctld/slurmd,
#                                   wait until the node is idle
#   scripts/slurm_local.sh stop     stop the three daemons (nothing else is undone)
#   scripts/slurm_local.sh status   show what runs and what sinfo says
#
# Environment (optional):
#   SLURM_LOCAL_TIMEOUT  seconds to wait for each daemon / the node to come up [60]
#   SLURM_LOCAL_CPUS     CPUs the node offers [nproc]
#
# Idempotent: packages are installed only when missing, the munge key is created only when
# missing, slurm.conf is rewritten only when its content would change (then the daemons are
# restarted), and daemons that already answer are left alone. A slurm.conf that this script did
# not write is never overwritten.
#
# It does not use systemd: in containers and CI VMs systemd is often not PID 1, so the daemons are
# started directly in their own daemon mode, with pid files under /run. Nothing is enabled at boot.
#
# Limits of this setup (see docs/CLUSTER.md): no GPUs are declared (no gres.conf), so the study
# must be run with `--backend cpu` and without `--gpus-per-task`; no accounting database
# (sacct does not work); no cgroups (proctrack/linuxproc, task/none): jobs are not confined to
# their CPUs or memory. SlurmUser=root keeps file ownership simple on a single machine.
set -euo pipefail

TIMEOUT=${SLURM_LOCAL_TIMEOUT:-60}
CONF=/etc/slurm/slurm.conf
MARK="# Written by rrpdem scripts/slurm_local.sh"
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
LOGDIR=/var/log/slurm

die() { echo "slurm_local.sh: error: $*" >&2; exit 1; }
log() { echo "slurm_local.sh: $*"; }

# pid_alive PIDFILE — the pid file exists and names a live process.
pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_for SECONDS DESCRIPTION CMD... — poll CMD once a second until it succeeds.
wait_for() {
  local secs=$1 what=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 1
  done
  log "$what: ok"
}

# Stop one daemon by its pid file, waiting up to TIMEOUT s for it to exit.
stop_pidfile() {
  local pidfile=$1 name=$2 pid
  if pid_alive "$pidfile"; then
    pid=$(cat "$pidfile")
    log "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    local end=$((SECONDS + TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
      ((SECONDS < end)) || die "$name (pid $pid) did not exit within ${TIMEOUT}s"
      sleep 0.5
    done
  fi
  rm -f "$pidfile"
}

stop_all() {
  stop_pidfile "$SLURMD_PID" slurmd
  stop_pidfile "$CTLD_PID" slurmctld
  if pid_alive "$MUNGE_PID"; then
    log "stopping munged (pid $(cat "$MUNGE_PID"))"
    # munged -s asks the daemon bound to the socket to exit and waits for it.
    munged -s >/dev/null 2>&1 || stop_pidfile "$MUNGE_PID" munged
  fi
  rm -f "$MUNGE_PID"
}

case ${1:-start} in
  stop) [[ $EUID -eq 0 ]] || die "must run as root"; stop_all; exit 0 ;;
  status)
    for p in "munged:$MUNGE_PID" "slurmctld:$CTLD_PID" "slurmd:$SLURMD_PID"; do
      if pid_alive "${p#*:}"; then echo "${p%%:*}: running (pid $(cat "${p#*:}"))"
      else echo "${p%%:*}: not running"; fi
    done
    sinfo 2>&1 || true
    exit 0 ;;
  start) ;;
  *) die "unknown command '$1' (use: start, stop, status)" ;;
esac

[[ $EUID -eq 0 ]] || die "must run as root (installs packages, writes /etc/slurm, starts daemons)"

# --- 1. packages ---------------------------------------------------------------------------------
# slurmctld (controller), slurmd (node daemon), slurm-client (sbatch, squeue, sinfo, scontrol),
# munge (authentication between them; Slurm's default AuthType).
pkgs=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} by hand"
  log "installing ${missing[*]}"
  apt-get update -q
  # The packages' postinst scripts try to start services through invoke-rc.d; without systemd or
  # with a policy-rc.d that denies it, that is only a warning.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# --- 2. munge ------------------------------------------------------------------------------------
# One key shared by all nodes; here there is one node. Debian's postinst usually creates it.
if [[ ! -s /etc/munge/munge.key ]]; then
  log "creating /etc/munge/munge.key"
  install -d -o munge -g munge -m 0700 /etc/munge
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile=/etc/munge/munge.key
  else
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
fi
# munged refuses to start unless the key is private to its user.
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge

if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  rm -f "$MUNGE_PID"
  log "starting munged"
  # Run as the munge user (as the Debian service does); munged forks into the background.
  runuser -u munge -- /usr/sbin/munged || die "munged failed to start: see /var/log/munge/munged.log"
  wait_for "$TIMEOUT" "munge credential round trip" sh -c 'munge -n | unmunge' ||
    die "munge -n | unmunge still fails after ${TIMEOUT}s: see /var/log/munge/munged.log"
fi

# --- 3. slurm.conf -------------------------------------------------------------------------------
host=$(hostname -s)
getent hosts "$host" >/dev/null || die "host name '$host' does not resolve: add it to /etc/hosts"
cpus=${SLURM_LOCAL_CPUS:-$(nproc)}
# Offer the node's memory less 1 GiB (or less 10% on small machines) for the OS; a RealMemory
# above what slurmd measures would make slurmctld drain the node ("Low RealMemory").
total_mb=$(free -m | awk '/^Mem:/ {print $2}')
reserve=$((total_mb / 10 < 1024 ? total_mb / 10 : 1024))
mem=$((total_mb - reserve))

install -d -m 0755 /etc/slurm "$LOGDIR" /var/spool/slurmctld /var/spool/slurmd

new_conf=$(cat <<EOF
$MARK: single-node Slurm for local tests.
# Rerun that script to regenerate; it will not overwrite a slurm.conf without this first line.
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
# No cgroups: they need a cgroup setup that containers and CI VMs often lack.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# No accounting database (slurmdbd): sacct is unavailable, squeue/scontrol work.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
# A node that was down (e.g. after this script restarted slurmd) returns to service by itself.
ReturnToService=2
# Keep finished jobs visible to scontrol for 10 minutes (the test reads their exit codes).
MinJobAge=600
SchedulerType=sched/backfill
# No MPI (rrpdem shards are independent processes) and no mail (avoids "MailProg is invalid").
# The "mpi/pmix_v4: can not load PMIx library" errors in both logs at startup are harmless:
# Slurm 22.05 probes every MPI plugin, and libpmix is not installed.
MpiDefault=none
MailProg=/bin/true
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
)

conf_changed=0
if [[ -e $CONF ]] && ! head -n1 "$CONF" | grep -qF "$MARK"; then
  die "$CONF exists and was not written by this script; move it away to let the script write one"
fi
if [[ ! -e $CONF ]] || [[ "$(cat "$CONF")" != "$new_conf" ]]; then
  log "writing $CONF (node $host, CPUs=$cpus, RealMemory=$mem)"
  printf '%s\n' "$new_conf" > "$CONF.tmp"
  mv "$CONF.tmp" "$CONF"
  conf_changed=1
fi

# --- 4. daemons ----------------------------------------------------------------------------------
if ((conf_changed)); then
  # Running daemons would keep the old configuration: restart them.
  stop_pidfile "$SLURMD_PID" slurmd
  stop_pidfile "$CTLD_PID" slurmctld
fi

if ! pid_alive "$CTLD_PID"; then
  log "starting slurmctld (log: $LOGDIR/slurmctld.log)"
  # Without -D, slurmctld forks into the background and writes its pid file.
  slurmctld || die "slurmctld failed to start: see $LOGDIR/slurmctld.log"
fi
wait_for "$TIMEOUT" "slurmctld answers" scontrol ping ||
  die "slurmctld does not answer 'scontrol ping' after ${TIMEOUT}s: see $LOGDIR/slurmctld.log"

if ! pid_alive "$SLURMD_PID"; then
  log "starting slurmd (log: $LOGDIR/slurmd.log)"
  slurmd || die "slurmd failed to start: see $LOGDIR/slurmd.log"
fi

node_ready() {
  local state
  state=$(sinfo -h -N -n "$host" -o '%T' 2>/dev/null | head -n1)
  case $state in
    idle|mixed|allocated|completing) return 0 ;;
    # A node left down or drained by an earlier run: put it back (ReturnToService covers most).
    down*|drain*|fail*) scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  return 1
}
wait_for "$TIMEOUT" "node $host up in partition debug" node_ready || {
  sinfo -N -l >&2 || true
  scontrol show node "$host" 2>&1 | grep -E 'State|Reason' >&2 || true
  die "node $host is not idle after ${TIMEOUT}s: see $LOGDIR/slurmd.log and $LOGDIR/slurmctld.log"
}
sinfo
