#!/usr/bin/env bash
# Chorus under a real Slurm: Debian's slurm-wlm (slurmctld + slurmd, munge for authentication)
# started on this machine by this script, in a temporary directory with its own slurm.conf (one
# node named after `hostname -s`, 4 CPUs declared so that 4 tasks fit whatever the core count,
# proctrack/pgid, task/none: no cgroup or systemd needed) and its own munged, then:
#  1. `srun -n 4 all_reduce_perf -b 8 -e 1M -f 4 -c 1 -J ...`: 4 ranks, Chorus's rank r is the
#     process srun started as task r (SLURM_PROCID r, SLURM_LOCALID r), every checked row
#     `#wrong 0`, `Out of bounds values : 0 OK`, exit 0 (the parser must also reject a copy of
#     the output with one wrong value and one with a failed footer);
#  2. `srun -n 4 python examples/python/multinode_ddp.py`: torch DDP on chorus, each rank's rank,
#     world size and local rank from Slurm equal to torch.distributed's, an all_reduce equal to
#     the sum computed independently, parameters equal across ranks after the DDP steps;
#  3. the same as a batch job: `sbatch --wait` of a script that runs it with srun (and a batch
#     script that starts all_reduce_perf itself, without srun, fails at once saying so).
# No CHORUS_COMM_ID or MASTER_ADDR/MASTER_PORT is set: Chorus takes the rendezvous address from
# srun's variables (src/core/slurm_env.h). The daemons are stopped at the end whatever happens.
# Usage (root; installs slurmctld, slurmd, slurm-client and munge when missing):
#   scripts/slurm_check.sh [build-dir]   (needs <build>/all_reduce_perf and <build>/python with
#                                         the torch backend: scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=$(cd "${1:-build}" && pwd)
start=$(date +%s)
say() { printf 'slurm_check: [%3ds] %s\n' "$(($(date +%s) - start))" "$*"; }

[ "$(id -u)" -eq 0 ] || { echo "slurm_check: needs root (it starts slurmd and munged)" >&2; exit 1; }
for f in "$build/all_reduce_perf" "$build/python/chorus/__init__.py"; do
  [ -e "$f" ] || { echo "slurm_check: $f missing: build first (scripts/setup.sh $build)" >&2; exit 1; }
done
py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
[ -x "$py" ] || { echo "slurm_check: the build's Python ($py) is missing" >&2; exit 1; }

# Debian's packages. A policy-rc.d keeps the packages' own services (munge with the system key,
# slurmctld/slurmd with /etc/slurm/slurm.conf) from starting: this script starts its own.
need=()
for pkg in slurmctld slurmd slurm-client munge; do  # (dpkg -s also accepts a removed package)
  [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] ||
    need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
  fi
  installed=0
  apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
      >/dev/null && installed=1
  [ -z "$policy" ] || rm -f "$policy"
  [ "$installed" -eq 1 ] || { echo "slurm_check: installing ${need[*]} failed" >&2; exit 1; }
fi
for cmd in slurmctld slurmd srun sbatch squeue scancel sinfo munged mungekey; do
  command -v "$cmd" >/dev/null || { echo "slurm_check: $cmd missing after install" >&2; exit 1; }
done
say "$(slurmctld -V), $(munged -V 2>&1 | head -1)"

T=$(mktemp -d /tmp/chorus-slurm.XXXXXX)
chmod 755 "$T"  # munged wants its socket's directory searchable by all
pids=()
ok=0
stepds() {  # the slurmstepd processes of this cluster: their environment names its slurm.conf
  local p
  for p in /proc/[0-9]*; do
    case $(cat "$p/comm" 2>/dev/null) in slurmstepd*) ;; *) continue ;; esac
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$T/slurm.conf" && echo "${p#/proc/}"
  done
}
cleanup() {
  set +e
  # Slurm's clients retry a controller that is not there for minutes: each call is bounded, and
  # made only while this script's slurmctld runs.
  if [ -n "${ctld_pid:-}" ] && kill -0 "$ctld_pid" 2>/dev/null; then
    SLURM_CONF=$T/slurm.conf timeout 10 scancel --quiet --user=root >/dev/null 2>&1
    for _ in $(seq 20); do  # jobs and their steps end (slurmstepd exits) before slurmd goes
      [ -z "$(SLURM_CONF=$T/slurm.conf timeout 5 squeue -h 2>/dev/null)" ] && [ -z "$(stepds)" ] &&
        break
      sleep 0.5
    done
  fi
  # This script's own children first (an srun or sbatch --wait still running), then the steps
  # left, then the daemons, newest first; each waited for, then killed outright.
  local pid i
  for pid in $(pgrep -P $$); do
    case " ${pids[*]} " in *" $pid "*) ;; *) kill "$pid" 2>/dev/null ;; esac
  done
  for pid in $(stepds); do kill "$pid" 2>/dev/null; done
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null; done
  for pid in "${pids[@]}" $(stepds); do
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  if [ "$ok" -ne 1 ]; then
    for f in "$T"/slurmctld.log "$T"/slurmd.log "$T"/munged.log; do
      [ -e "$f" ] && { echo "--- last lines of $f"; tail -n 25 "$f"; }
    done
  fi
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Runs a command in the background and waits for it: a signal to this script then runs the
# cleanup at once (bash runs traps only between foreground commands).
run_bg() { "$@" & wait $!; }

# munge: its own key and socket (the system's munged, if any, is left alone).
mungekey --create --keyfile="$T/munge.key" >/dev/null
munged --foreground --force --key-file="$T/munge.key" --socket="$T/munge.sock" \
  --pid-file="$T/munged.pid" --log-file="$T/munged.log" --seed-file="$T/munged.seed" \
  >"$T/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 40); do [ -S "$T/munge.sock" ] && break; sleep 0.25; done
[ -S "$T/munge.sock" ] || { echo "slurm_check: munged did not start" >&2; cat "$T/munged.out"; exit 1; }

# Two free ports for slurmctld and slurmd (unprivileged; nothing else of Slurm's listens).
read -r ctld_port slurmd_port < <("$py" -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
# The node is named after this host, as on a cluster; srun's tasks find rank 0 by that name
# (SLURM_STEP_NODELIST), so it must resolve: where it does not, the node is called localhost.
node=$(hostname -s)
if ! getent hosts "$node" >/dev/null; then
  say "host name $node does not resolve (getent hosts): the node is named localhost"
  node=localhost
fi
mkdir -p "$T/state" "$T/spool"
: >"$T/plugstack.conf"
cat >"$T/slurm.conf" <<EOF
# A one-node cluster for scripts/slurm_check.sh (everything under $T).
ClusterName=chorus
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge.sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
PlugStackConfig=$T/plugstack.conf
# No cgroup plugin: processes tracked by process group, no task binding (Chorus binds its ranks).
# Accounting, job completion and MPI plugins are left at their defaults (none): Slurm 23.11+ has
# no accounting_storage/none to name.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The node declares 4 CPUs whatever the machine has (CI and this machine: 2 cores).
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=chorus Nodes=$node Default=YES MaxTime=10 State=UP
EOF
export SLURM_CONF=$T/slurm.conf

slurmctld -D -i >"$T/slurmctld.out" 2>&1 &
ctld_pid=$!
pids+=($!)
slurmd -D -N "$node" >"$T/slurmd.out" 2>&1 &
pids+=($!)
state=""
deadline=$((SECONDS + 30))
while [ "$SECONDS" -lt "$deadline" ]; do  # bounded: 30 s (each sinfo too)
  state=$(timeout 3 sinfo -h -n "$node" -o %t 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || { echo "slurm_check: node $node not idle after 30 s (state '$state')" >&2; exit 1; }
say "slurmctld and slurmd up: node $node idle ($(timeout 5 sinfo -h -o '%P %D %c CPUs'))"

# The environment the jobs see: this build's package, and no rendezvous variables at all.
unset CHORUS_COMM_ID MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK CHORUS_RANK CHORUS_NRANKS
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}

# 1. The C tool under srun.
say "srun -n 4 all_reduce_perf -b 8 -e 1M -f 4 -c 1"
run_bg timeout 180 srun -n 4 -t 3 --kill-on-bad-exit=1 sh -c \
  'echo "task $SLURM_PROCID local $SLURM_LOCALID of $SLURM_NTASKS pid $$"
   exec "$0" -b 8 -e 1M -f 4 -c 1 -T 120 -J "$1"' "$build/all_reduce_perf" "$T/bench.json" \
  >"$T/bench.out" 2>&1 ||
  { cat "$T/bench.out"; echo "slurm_check: srun all_reduce_perf failed" >&2; exit 1; }
grep -v '^task ' "$T/bench.out"
"$py" - "$T/bench.out" "$T/bench.json" "$(hostname -s)" <<'EOF'
"""Checks the benchmark's output and JSON; then that the same check rejects a wrong value."""
import json, re, sys

out, js, host = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), sys.argv[3]


def problems(out, js):
    p = []
    tasks = {int(m[1]): (int(m[2]), int(m[3]), int(m[4]))
             for m in re.finditer(r"^task (\d+) local (\d+) of (\d+) pid (\d+)$", out, re.M)}
    if sorted(tasks) != [0, 1, 2, 3]:
        p.append(f"srun tasks {sorted(tasks)}")
    for t, (local, ntasks, _) in tasks.items():
        if (local, ntasks) != (t, 4):  # one node, block distribution: local id = task id
            p.append(f"task {t}: SLURM_LOCALID {local}, SLURM_NTASKS {ntasks}")
    cfg = js["config"]
    if (cfg["nranks"], cfg["nprocs"]) != (4, 4):
        p.append(f"nranks {cfg['nranks']} nprocs {cfg['nprocs']}")
    devs = {d["rank"]: d for d in js["devices"]}
    if sorted(devs) != [0, 1, 2, 3]:
        p.append(f"ranks {sorted(devs)}")
    for r, d in devs.items():  # Chorus's rank r is the process srun started as task r
        if r in tasks and d["pid"] != tasks[r][2]:
            p.append(f"rank {r} is pid {d['pid']}, task {r} is pid {tasks[r][2]}")
        if d["hostname"].split(".")[0] != host:  # this machine
            p.append(f"rank {r} on {d['hostname']}")
    sizes = [row["size"] for row in js["results"]]
    if sizes != [8 * 4**k for k in range(9)]:  # -b 8 -e 1M -f 4: 8 B .. 512 KiB
        p.append(f"sizes {sizes}")
    for row in js["results"]:
        for place in ("out_of_place", "in_place"):
            if row[place]["nwrong"] != 0:
                p.append(f"{row['size']} B {place}: nwrong {row[place]['nwrong']}")
    if js["out_of_bounds"] != {"count": 0, "okay": True}:
        p.append(f"out_of_bounds {js['out_of_bounds']}")
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+float\s+sum", l)]
    if len(rows) != len(sizes) or any(r[8] != "0" or r[12] != "0" for r in rows):
        p.append("table: rows or #wrong columns: " + repr([(r[0], r[8], r[12]) for r in rows]))
    if not re.search(r"^# Out of bounds values : 0 OK$", out, re.M):
        p.append("footer: no 'Out of bounds values : 0 OK'")
    return p


bad = problems(out, js)
if bad:
    sys.exit("slurm_check: all_reduce_perf under srun: " + "; ".join(bad))
# The check must be able to fail: one wrong element in the table and in the JSON, and the footer.
row = next(l for l in out.splitlines() if re.match(r"^\s+2048\s", l))
wrong_row = re.sub(r"^(\s*(?:\S+\s+){8})0(\s)", r"\g<1>3\2", row)  # out-of-place #wrong
assert wrong_row != row, row
js_wrong = json.loads(json.dumps(js))
js_wrong["results"][2]["in_place"]["nwrong"] = 1
js_oob = dict(js, out_of_bounds={"count": 1, "okay": False})
for o, j in ((out.replace(row, wrong_row), js),
             (out, js_wrong),
             (out, js_oob),
             (out.replace("Out of bounds values : 0 OK", "Out of bounds values : 1 FAILED"), js)):
    if not problems(o, j):
        sys.exit("slurm_check: the output check accepted a wrong result")
print(f"slurm_check: all_reduce_perf: 4 ranks = srun tasks 0-3 (local ids 0-3) on {host}, "
      f"{len(js['results'])} sizes 8 B - 512 KiB, #wrong 0 in every row, out of bounds 0 "
      "(and the check rejects a wrong value)")
EOF

# 1b. The mistake users make: a batch script of 4 tasks that starts the program itself, not with
# srun. Its environment says SLURM_PROCID=0 of SLURM_NTASKS=4, but it is no step: the program must
# fail at once saying so, not wait for 3 ranks that never come.
cat >"$T/nosrun.sbatch" <<EOF
#!/bin/bash
#SBATCH --ntasks=4
#SBATCH --time=2
#SBATCH --output=$T/nosrun.out
exec $build/all_reduce_perf -b 8 -e 8 -T 60
EOF
say "sbatch --wait of all_reduce_perf started without srun (must fail at once)"
if run_bg timeout 60 sbatch --wait "$T/nosrun.sbatch" >/dev/null; then
  cat "$T/nosrun.out"; echo "slurm_check: all_reduce_perf without srun succeeded" >&2; exit 1
fi
grep -q "this is no srun step" "$T/nosrun.out" ||
  { cat "$T/nosrun.out"; echo "slurm_check: no 'no srun step' error" >&2; exit 1; }
grep "no srun step" "$T/nosrun.out"

# 2. torch DDP on chorus under srun.
check_ddp() {  # output file, expected ranks
  local f=$1 n=$2 r
  for ((r = 0; r < n; r++)); do
    grep -q "^rank $r of $n local_rank $r host .* ok$" "$f" ||
      { cat "$f"; echo "slurm_check: rank $r's line missing or failed in $f" >&2; return 1; }
  done
  grep -q "^multinode_ddp: $n ranks on 1 nodes, .* OK$" "$f" ||
    { cat "$f"; echo "slurm_check: no OK summary in $f" >&2; return 1; }
}
say "srun -n 4 python examples/python/multinode_ddp.py"
run_bg timeout 240 srun -n 4 -t 4 --kill-on-bad-exit=1 "$py" "$src/examples/python/multinode_ddp.py" \
  --steps 10 >"$T/srun_ddp.out" 2>&1 ||
  { cat "$T/srun_ddp.out"; echo "slurm_check: srun DDP failed" >&2; exit 1; }
check_ddp "$T/srun_ddp.out" 4
grep '^multinode_ddp' "$T/srun_ddp.out"

# 3. The same as a batch job.
cat >"$T/ddp.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=chorus-ddp
#SBATCH --ntasks=4
#SBATCH --time=4
#SBATCH --output=$T/sbatch_ddp.out
srun $py $src/examples/python/multinode_ddp.py --steps 10
EOF
say "sbatch --wait (4 tasks: srun python examples/python/multinode_ddp.py)"
run_bg timeout 270 sbatch --wait "$T/ddp.sbatch" ||
  { cat "$T/sbatch_ddp.out" 2>/dev/null; echo "slurm_check: sbatch job failed" >&2; exit 1; }
check_ddp "$T/sbatch_ddp.out" 4
grep '^multinode_ddp' "$T/sbatch_ddp.out"

ok=1
say "all checks passed"
