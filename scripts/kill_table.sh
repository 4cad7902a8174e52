#!/usr/bin/env bash
# The kill tables of docs/reliability.md: 4 ranks (processes), one SIGKILLed at a random moment
# of a loop of one collective, KILLS times per collective, for
#   - lingering survivors (they keep their failed communicator until released: Processes/DeadPeer*)
#   - survivors that leave at once after their failure (exit, destroy then exit, abort then exit,
#     in turn: Processes/Cascade*)
# on one node and on two emulated nodes (CHORUS_HOSTID; TCP between them). Per collective: the
# survivor reports, the detection time (SIGKILL to the survivor's failed call returning; median,
# max) and the share of reports that blame the killed rank (must be 100%).
# The freeze tables: one rank stopped with SIGSTOP at a random moment, CHORUS_TIMEOUT=2 on every
# rank (Processes/FrozenRank*: one node, two emulated nodes, four of one rank each), KILLS runs
# per row: time from the SIGSTOP to each survivor's failure, and the share of reports that name
# the stopped rank. And two deaths on one node (TwoDeaths.*): at once, and 30 ms apart (a
# launcher ending the others), KILLS runs each.
# Then the hang detection at a scaled-down bound: rank 2 never calls, every rank has
# CHORUS_TIMEOUT=$HANG_TIMEOUT (default 2 s); time from the start of the wait to each rank's
# failure, and the rank its message blames.
#
#   scripts/kill_table.sh [BUILD=build] [KILLS=20]
#   HANG_RUNS=3 HANG_TIMEOUT=2 scripts/kill_table.sh ...     (HANG_RUNS=0: no hang table)
#   FILTER='Processes/Cascade*' scripts/kill_table.sh ...    (a gtest filter: a subset of rows)
#
# Drives build/tests/chorus_tests (CHORUS_KILL_ITERS, CHORUS_RELIABILITY_REPORT) and
# build/tests/chorus_reliability_worker; exits non-zero if a test failed (a report that blames
# another rank fails its test).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
KILLS=${2:-20}
HANG_RUNS=${HANG_RUNS:-3}
HANG_TIMEOUT=${HANG_TIMEOUT:-2}
FILTER=${FILTER:-'Processes/DeadPeer*:Processes/Cascade*:Processes/FrozenRank*:TwoDeaths.*'}
tests=$B/tests/chorus_tests
worker=$B/tests/chorus_reliability_worker
for f in "$tests" "$worker"; do
  [ -x "$f" ] || { echo "kill_table: $f not found (build first: scripts/setup.sh $B)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# CHORUS_KILL_ITERS=$KILLS CHORUS_FREEZE_RUNS=$KILLS $tests --gtest_filter='$FILTER'"
CHORUS_KILL_ITERS=$KILLS CHORUS_FREEZE_RUNS=$KILLS CHORUS_RELIABILITY_REPORT=$tmp/report \
  "$tests" --gtest_filter="$FILTER" >"$tmp/log" 2>&1
rc=$?
grep -E '^\[  FAILED  \]' "$tmp/log" | sort -u
# What failed, kept for reading (the log is removed with the temporary folder).
[ "$rc" -eq 0 ] || { grep -E -B2 -A12 'Failure$' "$tmp/log" | head -200 > kill_table_failures.txt;
                     echo "# failures: kill_table_failures.txt"; }
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg); gtest exit status $rc"

/usr/bin/python3 - "$tmp/report" <<'EOF'
import re, sys
rows = {}
for line in open(sys.argv[1]) if __import__("os").path.exists(sys.argv[1]) else []:
    m = re.match(r"deadpeer (\S+) nodes=(\d+) survivors=(\S+) kills=(\d+) reports=(\d+) "
                 r"median_ms=([\d.]+) max_ms=([\d.]+) named=(\d+)", line)
    if m:
        name, nodes, surv, kills, reports, med, mx, named = m.groups()
        rows.setdefault((int(nodes), surv), []).append(
            (name, int(kills), int(reports), float(med), float(mx), int(named)))
def pretty(name):
    for suffix, words in (("Tree", ", tree"), ("Hier", ", hierarchical"),
                          ("Ring2ch", ", ring on 2 channels")):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)] + words
    return name
for nodes in (1, 2):
    for surv in ("linger", "exit"):
        if (nodes, surv) not in rows:
            continue
        where = "one node" if nodes == 1 else "two emulated nodes (ranks 0,1 | 2,3)"
        who = ("lingering survivors" if surv == "linger"
               else "survivors that exit at once (exit / destroy+exit / abort+exit in turn)")
        print(f"\n{where}, {who}:\n")
        print("| collective | kills | survivor reports | median | max | blame the killed rank |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        tot = [0, 0]
        for name, kills, reports, med, mx, named in rows[(nodes, surv)]:
            tot[0] += reports; tot[1] += named
            print(f"| {pretty(name)} | {kills} | {reports} | {med:.0f} ms | {mx:.0f} ms | "
                  f"{named} of {reports} ({100.0 * named / max(reports, 1):.0f}%) |")
        print(f"\nall rows: {tot[1]} of {tot[0]} reports blame the killed rank")
frozen, deaths = {}, []
for line in open(sys.argv[1]) if __import__("os").path.exists(sys.argv[1]) else []:
    m = re.match(r"frozen (\S+) nodes=(\d+) survivors=(\S+) runs=(\d+) reports=(\d+) "
                 r"median_ms=([\d.]+) max_ms=([\d.]+) named=(\d+)", line)
    if m:
        name, nodes, surv, runs, reports, med, mx, named = m.groups()
        frozen.setdefault((int(nodes), surv), []).append(
            (name, int(runs), int(reports), float(med), float(mx), int(named)))
    m = re.match(r"twodeaths (\S+) gap_ms=(\d+) runs=(\d+) reports=(\d+) named=(\d+)", line)
    if m:
        deaths.append(m.groups())
for (nodes, surv), rows_ in sorted(frozen.items()):
    where = {1: "one node", 2: "two emulated nodes (ranks 0,1 | 2,3)",
             4: "four emulated nodes (one rank each)"}.get(nodes, f"{nodes} nodes")
    who = "lingering survivors" if surv == "linger" else "survivors that exit at once"
    print(f"\nfrozen rank (SIGSTOP, CHORUS_TIMEOUT=2), {where}, {who}:\n")
    print("| collective | runs | survivor reports | median | max | name the stopped rank |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    tot = [0, 0]
    for name, runs, reports, med, mx, named in rows_:
        tot[0] += reports; tot[1] += named
        print(f"| {pretty(name)} | {runs} | {reports} | {med:.0f} ms | {mx:.0f} ms | "
              f"{named} of {reports} ({100.0 * named / max(reports, 1):.0f}%) |")
    print(f"\nall rows: {tot[1]} of {tot[0]} reports name the stopped rank")
if deaths:
    print("\ntwo deaths on one node (lingering survivors):\n")
    print("| collective | second kill after | runs | survivor reports | name the first (gap) "
          "or agree on one of the two (at once) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for coll, gap, runs, reports, named in deaths:
        print(f"| {coll} | {gap} ms | {runs} | {reports} | {named} of {reports} |")
EOF

[ "$HANG_RUNS" -gt 0 ] || exit $rc
echo
echo "# hang: rank 2 never calls, CHORUS_TIMEOUT=$HANG_TIMEOUT on every rank, $HANG_RUNS runs per row"
/usr/bin/python3 - "$worker" "$HANG_RUNS" "$HANG_TIMEOUT" <<'EOF'
import os, re, secrets, socket, statistics, subprocess, sys, time
worker, runs, timeout_s = sys.argv[1], int(sys.argv[2]), sys.argv[3]
timeout = float(timeout_s)
hang = 2
def job(coll, nodes, mode):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    secret = secrets.token_hex(16)
    procs = []
    for r in range(4):
        env = dict(os.environ, CHORUS_RANK=str(r), CHORUS_NRANKS="4",
                   CHORUS_COMM_ID=f"127.0.0.1:{port}", CHORUS_SECRET=secret,
                   CHORUS_TIMEOUT=timeout_s)
        if nodes > 1:
            env["CHORUS_HOSTID"] = f"kill-table-node{r // 2}"
        args = [worker, "--coll", coll, "--hang-rank", str(hang), "--watchdog", "60"]
        args += ["--linger"] if mode == "linger" else ["--exit-on-failure", mode]
        procs.append(subprocess.Popen(args, env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    deadline = time.time() + timeout + 20
    outs = [""] * 4
    fds = {p.stdout.fileno(): r for r, p in enumerate(procs)}
    for fd in fds:
        os.set_blocking(fd, False)
    def pump():
        for fd, r in fds.items():
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if chunk:
                outs[r] += chunk.decode(errors="replace")
    # Every rank but the hung one reports (or exits); then all are ended.
    while time.time() < deadline:
        pump()
        if all("FAILED" in outs[r] or procs[r].poll() is not None for r in range(4) if r != hang):
            break
        time.sleep(0.01)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    for fd in fds:
        os.set_blocking(fd, True)
    for fd, r in fds.items():
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            outs[r] += chunk.decode(errors="replace")
    res = []
    for r in range(4):
        if r == hang:
            continue
        ready = re.search(r"READY rank=\d+ .* t=([\d.]+)", outs[r])
        failed = re.search(r"FAILED rank=\d+ code=\d+ name=(\S+) .*t=([\d.]+) iter=\d+ (?:culprit=-?\d+ )?msg=(.*)",
                           outs[r])
        if not (ready and failed):
            res.append((r, None, None, "no report"))
            continue
        msg = failed.group(3)
        rest = re.sub(r"^rank \d+: ", "", msg)
        blamed = re.search(r"rank (\d+)\b", rest)
        res.append((r, float(failed.group(2)) - float(ready.group(1)),
                    int(blamed.group(1)) if blamed else -1, f"{failed.group(1)}: {msg}"))
    return res
print("\n| collective | nodes | survivors | reports | detection median | max "
      "| blame the hung rank 2 |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
examples = []
for coll in ("AllReduce", "SendRecv"):
    for nodes in (1, 2):
        for mode in ("linger", "exit"):
            times, named, reports = [], 0, 0
            for _ in range(runs):
                for r, dt, blamed, msg in job(coll, nodes, mode):
                    reports += 1
                    if dt is not None:
                        times.append(dt)
                    named += blamed == hang
                    if blamed != hang:
                        examples.append(f"{coll}, {nodes} node(s), {mode}: {msg}")
            med = f"{statistics.median(times):.2f} s" if times else "-"
            mx = f"{max(times):.2f} s" if times else "-"
            print(f"| {coll} | {nodes} | {mode} | {reports} | {med} | {mx} | "
                  f"{named} of {reports} |")
if examples:
    print("\nreports that blame another rank (first 8):")
    for e in examples[:8]:
        print("  " + e)
EOF
exit $rc
