#!/usr/bin/env bash
# A one-node SLURM cluster on this host, for the SLURM tests (tests/slurm/, `make test-slurm`).
#
#   infrastructure/slurm/local_cluster.sh install      install Debian's slurmctld slurmd slurm-client munge where missing (root, apt)
#   infrastructure/slurm/local_cluster.sh folder       create the private cluster folder, or check an existing one; print its path
#   infrastructure/slurm/local_cluster.sh start        write the config, start munged, slurmctld, slurmd; wait for an idle node
#   infrastructure/slurm/local_cluster.sh stop         stop the daemons this script started (by their recorded pids)
#   infrastructure/slurm/local_cluster.sh status       exit 0 when the cluster answers and its node is up
#   infrastructure/slurm/local_cluster.sh env          the environment a client needs (eval "$(... env)")
#   infrastructure/slurm/local_cluster.sh run CMD...   start (unless already running), run CMD with SLURM_CONF set,
#                                                      then stop what this call started (on any exit)
#
# Everything lives in one folder, $RLVR_SLURM_DIR (default ${TMPDIR:-/tmp}/rlvr-slurm-<uid>): slurm.conf,
# a fresh munge key and socket, state, spool, logs, pid files and the job-completion log. Nothing under
# /etc is read or written, so the host's own munge/SLURM (if any) are left alone; the ports are free
# ones picked at start, so a second cluster on the same host does not collide.
#
# The folder is private, because root writes in it and its munge key mints credentials for any uid
# (SECURITY.md "The local SLURM cluster"): created fresh with mode 0700, or used only when it is a real
# directory (not a link) that this user owns with mode 0700, in a parent that no one else may rename it
# in, holding no link (symbolic or hard) and nothing of another user's, and a munge key (if any) that no
# one else can read. Anything else is refused with the fix; nothing is written before the check. Files
# are written under umask 077 into fresh mktemp names and renamed into place (a rename replaces a link,
# it never writes through one). Only root can use this cluster: its config and socket are in the folder.
#
# The node is this machine as it is: its hostname, its CPU count (nproc) and its memory (/proc/meminfo,
# less 512 MB). No cgroups (containers often lack a writable cgroup tree): ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none, SelectType=select/cons_tres with CR_CPU (memory is not a consumable, so jobs are
# not refused for asking more than the node has free). No accounting database: sacct does not answer;
# finished jobs stay in `scontrol show job` for MinJobAge (1 h) and every ending (also requeues) is
# appended to jobcomp.log (jobcomp/filetxt).
#
# Safe to run twice: `start` on a running cluster only checks it; `start` after a crash stops the
# recorded pids that are still ours (their command line names this folder) and starts afresh; `run`
# stops only what it started itself. Needs root (slurmd runs jobs as their owner) and the Debian
# packages slurmctld, slurmd, slurm-client, munge (`make test-slurm` installs them).
set -euo pipefail
umask 077

DIR="${RLVR_SLURM_DIR:-${TMPDIR:-/tmp}/rlvr-slurm-$(id -u)}"
CONF="$DIR/slurm.conf"
WAIT_S="${RLVR_SLURM_WAIT_S:-60}"
DAEMONS=(munged slurmctld slurmd)
CHECKED=0 # set by check_private: the folder is private, its files may be read and written

log() { echo "local_cluster: $*" >&2; }
die() {
	log "$*"
	exit 1
}

need() {
	[ "$(id -u)" -eq 0 ] || die "needs root: slurmd starts every job as the user who submitted it"
	local missing=()
	for b in munged slurmctld slurmd sinfo sbatch scontrol squeue; do
		command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || missing+=("$b")
	done
	[ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]}: install Debian's slurmctld slurmd slurm-client munge (make test-slurm does)"
}

PACKAGES=(slurmctld slurmd slurm-client munge)

install() {
	local missing=() b
	for b in munged slurmctld slurmd sinfo sbatch scontrol squeue scancel; do
		command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || missing+=("$b")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		log "SLURM and munge are installed ($(slurmctld -V 2>/dev/null || echo '?'))"
		return 0
	fi
	[ "$(id -u)" -eq 0 ] || die "missing ${missing[*]} and not root: cannot install ${PACKAGES[*]} (run as root, or install them yourself)"
	{ [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; } ||
		die "missing ${missing[*]} on a system without Debian's apt: install ${PACKAGES[*]} (SLURM >= 22.05, munge) yourself"
	log "installing ${PACKAGES[*]} (missing: ${missing[*]})"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || die "apt-get update failed: Debian's package registry is needed to install ${PACKAGES[*]}"
	apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null || die "apt-get install ${PACKAGES[*]} failed"
}

bin() { command -v "$1" 2>/dev/null || echo "/usr/sbin/$1"; }

refuse() {
	die "refusing the cluster folder $DIR: $1. Fix: remove it (rm -rf -- '$DIR') or set RLVR_SLURM_DIR to a path that does not exist yet"
}

# The folder is usable when no one but this user can have put anything in it, or can later.
check_private() {
	local parent owner mode found me
	me="$(id -u)"
	parent="$(dirname -- "$DIR")"
	read -r owner mode < <(stat -L -c '%u %a' -- "$parent")
	# A parent another user may write in lets that user rename the folder away and plant another
	# (unless it is sticky, as /tmp is: then only the folder's owner may rename it).
	if [ "$owner" != 0 ] && [ "$owner" != "$me" ]; then
		refuse "its parent $parent belongs to uid $owner, who could replace the folder"
	fi
	if (((8#$mode & 8#022) != 0 && (8#$mode & 8#1000) == 0)); then
		refuse "its parent $parent (mode $mode) is writable by others and not sticky"
	fi
	[ ! -L "$DIR" ] || refuse "it is a symbolic link (to $(readlink -- "$DIR"))"
	[ -d "$DIR" ] || refuse "it is not a directory"
	read -r owner mode < <(stat -c '%u %a' -- "$DIR")
	[ "$owner" = "$me" ] || refuse "it belongs to uid $owner, not to $(id -un) (uid $me): that user could have planted links or a munge key in it"
	[ "$mode" = 700 ] || refuse "its mode is $mode, not 700: others could have planted links or a munge key in it"
	found="$(find "$DIR" -type l -print -quit)"
	[ -z "$found" ] || refuse "it holds a symbolic link ($found -> $(readlink -- "$found")): root would write through it"
	found="$(find "$DIR" -type f -links +1 -print -quit)"
	[ -z "$found" ] || refuse "it holds a file with another hard link ($found): root would write through it"
	found="$(find "$DIR" ! -user "$me" -print -quit)"
	[ -z "$found" ] || refuse "it holds $found, which belongs to uid $(stat -c %u -- "$found")"
	if [ -e "$DIR/munge.key" ]; then
		[ -f "$DIR/munge.key" ] || refuse "its munge.key is not a regular file"
		mode="$(stat -c '%a' -- "$DIR/munge.key")"
		(((8#$mode & 8#077) == 0)) || refuse "its munge.key (mode $mode) is readable or writable by others: whoever read it can mint credentials for any uid"
	fi
	CHECKED=1
}

# Create the folder fresh (0700) or check the one that is there; nothing is written before this.
private_dir() {
	mkdir -p -- "$(dirname -- "$DIR")"
	if [ ! -e "$DIR" ] && [ ! -L "$DIR" ]; then
		mkdir -m 700 -- "$DIR" 2>/dev/null || true # lost a race: the one that is there is checked
	fi
	check_private
}

# stdin into $1 (a path in the folder): a fresh mktemp file (0600, O_EXCL) renamed into place.
put() {
	local tmp
	tmp="$(mktemp -- "$1.XXXXXX")"
	cat >"$tmp"
	mv -f -- "$tmp" "$1"
}

# A fresh munge key: 1 KiB from /dev/urandom into a new 0600 file, made read-only, then renamed into place.
new_key() {
	local tmp
	tmp="$(mktemp -- "$DIR/munge.key.XXXXXX")"
	dd if=/dev/urandom of="$tmp" bs=1024 count=1 status=none
	chmod 400 -- "$tmp"
	mv -f -- "$tmp" "$DIR/munge.key"
}

# The pid recorded for a daemon, only if that process is alive and is ours (its command line names $DIR).
ours() {
	local f="$DIR/$1.pid" pid
	[ -f "$f" ] || return 1
	pid="$(cat "$f")"
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$DIR" || return 1
	echo "$pid"
}

client_env() {
	export SLURM_CONF="$CONF"
	# the client commands' munge socket comes from AuthInfo in slurm.conf
}

answering() {
	[ -f "$CONF" ] || return 1
	client_env
	local state
	state="$(sinfo -h -N -o '%T' 2>/dev/null | head -1)" || return 1
	case "$state" in idle* | mixed* | allocated* | completing*) return 0 ;; *) return 1 ;; esac
}

running() {
	local d
	for d in "${DAEMONS[@]}"; do ours "$d" >/dev/null || return 1; done
	answering
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

write_config() {
	local host cpus mem_mb ctld_port slurmd_port
	host="$(hostname -s)"
	cpus="$(nproc)"
	mem_mb="$(awk '/^MemTotal:/ {print int($2 / 1024) - 512}' /proc/meminfo)"
	ctld_port="$(free_port)"
	slurmd_port="$(free_port)"
	[ "$ctld_port" != "$slurmd_port" ] || slurmd_port=$((ctld_port + 1))
	mkdir -p -- "$DIR/state" "$DIR/spool" "$DIR/log"
	put "$CONF" <<EOF
# Written by infrastructure/slurm/local_cluster.sh for $host: one node, no cgroups, no accounting.
ClusterName=rlvr-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.daemon.pid
SlurmdPidFile=$DIR/slurmd.daemon.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# Finished jobs stay visible to scontrol for an hour (there is no sacct without slurmdbd).
MinJobAge=3600
# Seconds between SIGTERM and SIGKILL when a job ends early (scancel, requeue, time limit): time to checkpoint.
KillWait=60
# Let a job past its time limit run this long before it is killed (its USR2 warning comes earlier).
OverTimeLimit=0
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
# Preemption by partition priority: a job in partition urgent that needs the node requeues the debug jobs in its
# way at once, as scontrol requeue does (SIGCONT + SIGTERM, SIGKILL after KillWait: time to finish a step and
# checkpoint). Partition graced has a GraceTime, as many clusters do: SLURM sends SIGTERM and requeues only
# a job still running when the grace time ends, so the pipeline requeues itself after its checkpoint
# (rlvr/runtime/slurm_requeue.py).
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=graced Nodes=$host MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=60
PartitionName=urgent Nodes=$host MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
	# A key for this folder only (the host's /etc/munge is not touched); one that is there passed
	# check_private (ours, readable by no one else) and is kept.
	[ -s "$DIR/munge.key" ] || new_key
}

start_daemon() {
	local name="$1"
	shift
	# Foreground daemons started in the background: $! is the daemon itself. setsid: the cluster
	# outlives a `start` call and is not hit by the caller's terminal signals.
	setsid "$@" >>"$DIR/log/$name.out" 2>&1 </dev/null &
	echo $! | put "$DIR/$name.pid"
}

stop() {
	local d pid stopped=0
	# Pid files are read (and their processes signalled) only from a folder that passed check_private.
	[ "$CHECKED" = 1 ] || return 0
	# Jobs first, while slurmctld still answers: slurmd's job steps (slurmstepd) would outlive it.
	if ours slurmctld >/dev/null && [ -f "$CONF" ]; then
		client_env
		scancel --full --user="$(id -un)" 2>/dev/null || true
		for _ in $(seq 50); do [ -z "$(squeue -h -u "$(id -un)" 2>/dev/null)" ] && break; sleep 0.2; done
	fi
	for d in slurmd slurmctld munged; do
		if pid="$(ours "$d")"; then
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
			kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
			stopped=1
		fi
		rm -f "$DIR/$d.pid"
	done
	[ "$stopped" -eq 0 ] || log "stopped (folder $DIR)"
}

start() {
	[ "$(id -u)" -eq 0 ] || die "needs root: slurmd starts every job as the user who submitted it"
	private_dir
	need
	if running; then
		log "already running (SLURM_CONF=$CONF)"
		return 0
	fi
	stop # leftovers of a crashed start: only pids that are ours
	rm -f "$DIR/munge.socket" "$DIR/munge.socket.lock"
	write_config
	start_daemon munged "$(bin munged)" --foreground --force --socket="$DIR/munge.socket" \
		--key-file="$DIR/munge.key" --pid-file="$DIR/munged.daemon.pid" --log-file="$DIR/log/munged.log" \
		--seed-file="$DIR/munged.seed"
	for _ in $(seq 50); do [ -S "$DIR/munge.socket" ] && break; sleep 0.1; done
	[ -S "$DIR/munge.socket" ] || die "munged did not start: $(tail -5 "$DIR/log/munged.log" "$DIR/log/munged.out" 2>/dev/null)"
	start_daemon slurmctld "$(bin slurmctld)" -D -i -f "$CONF"
	start_daemon slurmd "$(bin slurmd)" -D -f "$CONF" -N "$(hostname -s)"
	local deadline=$((SECONDS + WAIT_S))
	until answering; do
		if [ $SECONDS -ge $deadline ] || ! ours slurmctld >/dev/null || ! ours slurmd >/dev/null; then
			log "the node did not come up idle within ${WAIT_S}s; last log lines:"
			tail -n 15 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" "$DIR/log/"*.out >&2 2>/dev/null || true
			stop
			exit 1
		fi
		sleep 0.5
	done
	log "up: $(SLURM_CONF="$CONF" sinfo -h -N -o '%N %T cpus=%c mem=%mMB') (SLURM_CONF=$CONF)"
}

# The folder of a command that only reads or stops: checked when it is there, never created.
existing_dir() {
	if [ -e "$DIR" ] || [ -L "$DIR" ]; then check_private; else return 1; fi
}

main() {
	case "${1:-}" in
	install) install ;;
	folder)
		private_dir
		echo "$DIR"
		;;
	start) start ;;
	stop) if existing_dir; then stop; fi ;;
	status) existing_dir && running ;;
	env) echo "export SLURM_CONF=$CONF" ;;
	run)
		shift
		[ $# -gt 0 ] || die "usage: $0 run CMD..."
		if existing_dir && running; then
			log "using the running cluster (SLURM_CONF=$CONF); it is left running"
		else
			trap stop EXIT
			trap 'exit 130' INT TERM
			start
		fi
		client_env
		set +e
		"$@"
		rc=$?
		set -e
		exit $rc
		;;
	*)
		sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

# Sourced (tests/unit/test_slurm_local_cluster.py calls the folder and key functions): define only.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	main "$@"
fi
