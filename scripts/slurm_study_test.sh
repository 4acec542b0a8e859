#!/bin/bash
# slurm_study_test.sh — run a study through Slurm the way docs/CLUSTER.md tells users to (a job
# array of shards, then a merge job that depends on it) and check the result against an
# unsharded run of the same study.
#
# Usage: scripts/slurm_study_test.sh RRPDEM STUDY.json [N_SHARDS] [WORKDIR]
#   RRPDEM     the rrpdem binary to test
#   STUDY.json a study file (its base scenario is found relative to it, as rrpdem does)
#   N_SHARDS   array size [3]
#   WORKDIR    where outputs and job logs go [a new mktemp -d folder]; must be visible to the
#              compute nodes (on the single node of scripts/slurm_local.sh, any local folder)
#
# Environment (optional):
#   SLURM_TEST_TIMEOUT   seconds to wait for the array and the merge to finish [900]
#   SLURM_TEST_PARTITION partition to submit to [the cluster's default]
#
# Needs a running Slurm (e.g. scripts/slurm_local.sh). Runs with --backend cpu and without
# --gpus-per-task: the local node declares no GPUs. On a GPU cluster, use the sbatch script of
# docs/CLUSTER.md as it is. --cpus-per-task is 1 here (the docs' 4 cannot be satisfied on a
# 2-CPU node and would leave the jobs pending forever).
#
# Checks: every array task and the merge job end COMPLETED with exit code 0; WORKDIR/sharded/
# study.csv has one line per variant plus a header, every variant `completed`; and it equals the
# unsharded run's study.csv apart from the timing columns (wall_time_s, particle_steps_per_s).
# Exit status 0 when all hold, 1 otherwise, with the reason on stderr.
set -euo pipefail

die() { echo "slurm_study_test.sh: error: $*" >&2; exit 1; }
log() { echo "slurm_study_test.sh: $*"; }

(($# >= 2 && $# <= 4)) || die "usage: $0 RRPDEM STUDY.json [N_SHARDS] [WORKDIR]"
rrpdem=$(realpath -e "$1" 2>/dev/null) || die "rrpdem binary '$1' not found"
[[ -x $rrpdem ]] || die "'$rrpdem' is not executable"
study=$(realpath -e "$2" 2>/dev/null) || die "study file '$2' not found"
n=${3:-3}
[[ $n =~ ^[1-9][0-9]*$ ]] || die "N_SHARDS must be a positive integer, got '$n'"
timeout_s=${SLURM_TEST_TIMEOUT:-900}
partition=()
[[ -n ${SLURM_TEST_PARTITION:-} ]] && partition=(--partition="$SLURM_TEST_PARTITION")

for c in sbatch squeue scontrol scancel sinfo python3; do
  command -v "$c" >/dev/null || die "'$c' not found: is Slurm installed? (scripts/slurm_local.sh)"
done
timeout 30 scontrol ping 2>/dev/null | grep -q 'UP' ||
  die "slurmctld does not answer 'scontrol ping': start Slurm first (scripts/slurm_local.sh)"

if [[ -n ${4:-} ]]; then
  work=$4
  mkdir -p "$work"
  work=$(realpath "$work")
  [[ -z $(ls -A "$work") ]] || die "WORKDIR '$work' is not empty (the test needs fresh outputs)"
else
  work=$(mktemp -d /tmp/rrpdem-slurm-test.XXXXXX)
fi
log "work folder: $work"

# The docs' scripts call `rrpdem` from PATH; sbatch passes this shell's environment (PATH
# included) to the jobs by default (--export=ALL).
mkdir -p "$work/bin"
ln -sf "$rrpdem" "$work/bin/rrpdem"
export PATH="$work/bin:$PATH"

# --- 1. the reference: the whole study in one process, outside Slurm -----------------------------
log "unsharded reference run"
t0=$SECONDS
timeout "$timeout_s" rrpdem study "$study" --backend cpu --out "$work/whole" > "$work/whole.log" 2>&1 ||
  die "the unsharded run failed (exit $?): see $work/whole.log"
log "unsharded run: $((SECONDS - t0)) s"
[[ -s $work/whole/study.csv ]] || die "the unsharded run wrote no $work/whole/study.csv"

# --- 2. the docs' scripts, adapted for this node -------------------------------------------------
# Same as study.sbatch in docs/CLUSTER.md, except --backend cpu, no --gpus-per-task and
# --cpus-per-task=1; the output folder is an absolute path so the merge job finds it wherever it
# starts.
cat > "$work/study.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=rrpdem-study
#SBATCH --cpus-per-task=1
#SBATCH --time=04:00:00
#SBATCH --output=$work/logs/%x-%A_%a.out
set -euo pipefail
rrpdem study "\$1" --backend cpu --out "$work/sharded" \\
  --shard "\${SLURM_ARRAY_TASK_ID}/\${SLURM_ARRAY_TASK_COUNT}"
EOF
mkdir -p "$work/logs"

cd "$work"
t0=$SECONDS
# --parsable prints "jobid" or "jobid;cluster".
array=$(timeout 60 sbatch --parsable "${partition[@]}" --array=0-$((n - 1)) study.sbatch "$study") ||
  die "sbatch of the job array failed"
array=${array%%;*}
# afterany: the merge runs even when a shard failed, and then reports its missing variants.
merge=$(timeout 60 sbatch --parsable "${partition[@]}" --dependency=afterany:"$array" \
  --job-name=rrpdem-merge --output="$work/logs/%x-%j.out" \
  --wrap "rrpdem study --merge $work/sharded") || {
  scancel "$array" 2>/dev/null || true
  die "sbatch of the merge job failed"
}
merge=${merge%%;*}
log "submitted array job $array (tasks 0-$((n - 1))) and merge job $merge (afterany:$array)"

# --- 3. wait for both, with a timeout ------------------------------------------------------------
end=$((SECONDS + timeout_s))
while :; do
  left=$(squeue -h -j "$array,$merge" -o '%i %T %r' 2>/dev/null) || left="?"
  [[ -z $left ]] && break
  if ((SECONDS >= end)); then
    echo "$left" >&2
    scancel "$array" "$merge" 2>/dev/null || true
    die "jobs still queued or running after ${timeout_s}s (cancelled): see $work/logs and sinfo"
  fi
  sleep 2
done
log "array + merge finished in $((SECONDS - t0)) s"

# --- 4. job states and exit codes ----------------------------------------------------------------
# No accounting database here (no sacct): scontrol keeps finished jobs for MinJobAge seconds.
fail=0
check_jobs() {
  local id=$1 what=$2 info line name state code
  info=$(scontrol -o show job "$id" 2>/dev/null) ||
    die "scontrol no longer knows job $id ($what): raise MinJobAge in slurm.conf"
  while read -r line; do
    # One line per job, or per task of an array: JobId=.. [ArrayJobId=.. ArrayTaskId=..] ...
    name=$(grep -o 'JobId=[0-9]*' <<<"$line" | head -n1 || true)
    if [[ $line =~ ArrayJobId=([0-9]+)\ ArrayTaskId=([0-9]+) ]]; then
      name="${BASH_REMATCH[1]}_${BASH_REMATCH[2]}"
    fi
    state=$(grep -o 'JobState=[A-Z_]*' <<<"$line" || true)
    code=$(grep -o ' ExitCode=[0-9:]*' <<<"$line" || true)
    echo "  $what ${name#JobId=}: ${state#JobState=}, exit code ${code# ExitCode=}"
    if [[ $state != JobState=COMPLETED || $code != " ExitCode=0:0" ]]; then fail=1; fi
  done <<<"$info"
}
check_jobs "$array" shard
check_jobs "$merge" merge
if ((fail)); then
  tail -n 20 "$work"/logs/*.out >&2 || true
  die "a job did not complete with exit code 0 (logs above and in $work/logs)"
fi

# --- 5. the merged study.csv ---------------------------------------------------------------------
csv=$work/sharded/study.csv
[[ -s $csv ]] || die "the merge wrote no $csv"
variants=$(($(wc -l < "$work/whole/study.csv") - 1))
# study.csv is RFC 4180 (an array-valued override is one quoted cell holding commas): read it
# with Python's csv module, not by splitting lines at commas.
records() { python3 -c 'import csv, sys; print(len(list(csv.reader(open(sys.argv[1], newline="")))))' "$1"; }
lines=$(records "$csv")
((lines == variants + 1)) || die "$csv has $lines records, expected $((variants + 1)) ($variants variants + header)"
not_done=$(python3 -c 'import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
s = rows[0].index("status") if "status" in rows[0] else None
print(" ".join(r[0] for r in rows[1:] if s is None or len(r) != len(rows[0]) or r[s] != "completed"))' "$csv")
[[ -z $not_done ]] || die "variants not completed in $csv: $not_done"

# Drop the timing columns, found by name, and compare the rest byte for byte.
strip_timing() {
  python3 -c 'import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
keep = [i for i, h in enumerate(rows[0]) if h not in ("wall_time_s", "particle_steps_per_s")]
w = csv.writer(sys.stdout, lineterminator="\n")
for r in rows:
    w.writerow([r[i] for i in keep if i < len(r)])' "$1"
}
if ! diff <(strip_timing "$work/whole/study.csv") <(strip_timing "$csv") > "$work/diff.txt"; then
  head -n 20 "$work/diff.txt" >&2
  die "sharded study.csv differs from the unsharded one apart from timing (full diff: $work/diff.txt)"
fi

log "OK: $n shards + merge through Slurm: $variants variants, all completed, study.csv equal to the unsharded run's apart from wall_time_s and particle_steps_per_s"
log "outputs kept in $work"
