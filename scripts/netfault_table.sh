#!/usr/bin/env bash
# The network-fault table of docs/reliability.md: 4 ranks under chorusrun --netns (each emulated
# node in its own network namespace, veth links to a bridge), one node pair (2 nodes x 2 ranks)
# and four nodes (4 x 1), each looping an AllReduce that checks every result
# (tests/netfault_worker.cc). After 20 calls the last node's network fails, one kind per row:
#   down     its link set down (ip link set dev ... down in its namespace) and left down
#   gone     its host vanishes: its veth pair deleted, its ranks stopped (SIGSTOP), its namespace
#            deleted; only the other nodes' ranks survive to report
#   drop     a firewall on the switch drops every frame the node sends (nft, bridge family): its
#            connections are half-open, it still receives
#   flap     its link down for 1.5 s, then up again (shorter than CHORUS_TIMEOUT)
#   loss5, loss30   nft in its namespace drops 5% / 30% of what it sends (numgen random)
#   hangmute its last rank stops calling, and as the timeouts fire rank 2's node sends no TCP data
#            or ACK for 2 s: every survivor must name the hung rank, not rank 2, whose answers to
#            status queries come late (CHORUS_TIMEOUT over 8 s)
#   hang30   its last rank stops calling (it hangs in its own code) and its node loses 30% (hangNN:
#            NN%) of what it sends: every survivor must name that rank, never another (the status
#            queries that follow the waits cross the lossy link); a survivor that finds only the
#            network too slow (culprit -1) names no one and is counted apart
# down, gone and drop must fail every survivor within CHORUS_TIMEOUT + 3 s, each naming a network
# failure and the unreachable node(s) (a survivor on the failed node names every other node);
# flap and loss must complete with exact results. Per row: trials, trials where every survivor
# named the right culprit (or completed, for flap and loss), the worst detection time (fault to
# a survivor's failed call; for flap/loss the worst run time), hangs (chorusrun's timeout, or a
# survivor without a report), leftovers (namespaces or /dev/shm files of the job after it ended).
#
#   scripts/netfault_table.sh [BUILD=build] [TRIALS=20]
#   FAULTS="down flap" SHAPES="2x2" TIMEOUT=5 scripts/netfault_table.sh build 5
#   scripts/netfault_table.sh build --trial FAULT NODES    one trial, one JSON line (the tests)
#   scripts/netfault_table.sh build --soak MINUTES [SEED]  the network soak (below)
#   scripts/netfault_table.sh build --soak-job SECONDS NODES RANKS SEED   one of its jobs (tests)
#
# The network soak (--soak): for MINUTES, job after job on a random shape (2x1, 3x1, 2x2, 4x1).
# Three jobs in four run the worker's mix (AllReduce, AllGather, Send/Recv, Broadcast,
# ReduceScatter, 1-256 Ki int32, every result checked) for 20-40 s while faults that must only
# slow it hit random nodes one after another: 5% or 30% loss for 1-5 s, or the link down for
# 0.3-3 s, each healed 1.5 s before the ranks stop; CHORUS_TIMEOUT is 30 there, and every rank
# must finish with exact results. The fourth job is a trial of a fault that must be named (down,
# gone or drop; 2x2 or 4x1), judged as in the table. No job may hang or leave a namespace or
# /dev/shm file behind. The last line: NETSOAK SUMMARY ... -> PASS | FAIL.
#
# LAUNCH=hand starts the ranks as a user's own launcher does (scripts/netns_node_ranks.sh: each
# node starts its ranks with torchrun's variables, nothing watches them) and a survivor exits at
# its report (--linger-ms 0), where under chorusrun (the default) it lingers until the others
# reported: the survivors left must still name the right culprit, not the one that exited.
#
# LAUNCH=torchrun starts each node's ranks by torchrun itself (netns_node_ranks.sh --torchrun: one
# agent per node, static rendezvous at node 0), whose agent stops a node's other ranks (SIGTERM)
# once one ended, as a multi-node torchrun job does; survivors exit at their report, as by hand.
#
# WORKER=torch runs the same AllReduce loop as a torch program (python/tests/netfault_worker.py,
# torch's "chorus" backend, the group's timeout CHORUS_TIMEOUT); a survivor re-raises its error
# after its report, as a torch program ends.
#
# Needs root, iproute2 and nftables (apt-get install nftables). Exits non-zero if a trial was
# wrong, hung or left something behind.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
shift || true
exec /usr/bin/python3 - "$B" "$@" <<'EOF'
import json, os, re, signal, subprocess, sys, time

B = sys.argv[1]
args = sys.argv[2:]
chorusrun = next((p for p in (f"{B}/chorusrun", f"{B}/tools/run/chorusrun") if os.path.exists(p)),
                 None)
worker = f"{B}/tests/chorus_netfault_worker"
if not chorusrun or not os.path.exists(worker):
    sys.exit(f"netfault_table: chorusrun or {worker} not found (build first)")
TIMEOUT = float(os.environ.get("TIMEOUT", "5"))
# LAUNCH=hand or torchrun: the nodes start their ranks themselves (scripts/netns_node_ranks.sh).
TORCHRUN = os.environ.get("LAUNCH", "chorusrun") == "torchrun"
HAND = TORCHRUN or os.environ.get("LAUNCH", "chorusrun") == "hand"
# WORKER=torch: the ranks are python/tests/netfault_worker.py, the same loop through torch's
# "chorus" backend (PYTHON: default .venv/bin/python, else python3; the build's package).
TORCH = os.environ.get("WORKER", "c") == "torch"
if TORCH or TORCHRUN:
    PYTHON = os.environ.get("PYTHON") or (".venv/bin/python" if os.path.exists(".venv/bin/python")
                                          else "python3")
    os.environ["PYTHONPATH"] = os.path.abspath(f"{B}/python") + (
        ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
# How long a trial's ranks may take to make their first 20 calls, and the worker's watchdog
# (chorusrun's bound 10 s more): four torch processes import torch (about 2 s of CPU each) and
# init, which a loaded machine stretches (a CI run beside a compile, load average 12, passed 60 s).
STARTUP, WATCHDOG = (180, 290) if TORCH else (60, 110)
FAIL_FAULTS = ("down", "gone", "drop")

def sh(*cmd):
    return subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

def nft_drop(run, ns, family, table, hook, *match):
    """A firewall in namespace ns, through run(*cmd): table `table` of `family`, one chain at
    `hook`, one rule that drops what `match` selects (delete the table to lift it)."""
    nft = ("ip", "netns", "exec", ns, "nft")
    run(*nft, "add", "table", family, table)
    run(*nft, "add", "chain", family, table, "c", f"{{ type filter hook {hook} priority 0; }}")
    run(*nft, "add", "rule", family, table, "c", *match, "drop")

def mono():
    return time.clock_gettime(time.CLOCK_MONOTONIC)

class Job:
    """A chorusrun job: its output read without blocking (pump) into out."""
    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, bufsize=1)
        os.set_blocking(self.p.stdout.fileno(), False)
        self.out = []

    def pump(self):
        while True:
            try:
                line = self.p.stdout.readline()
            except (BlockingIOError, TypeError):
                return
            if not line:
                return
            self.out.append(line)

    def finish(self):
        """Waits for the end (chorusrun's own --timeout is the hang bound); all it printed."""
        while self.p.poll() is None:
            self.pump()
            time.sleep(0.05)
        self.pump()
        rest = self.p.stdout.read()
        if rest:
            self.out.append(rest)
        return "".join(self.out)

def leftovers(pid, pids):
    """The job's namespaces (deleted) and its ranks' /dev/shm files, after it ended."""
    time.sleep(0.2)
    left = [l.split()[0] for l in sh("ip", "netns", "list").stdout.splitlines()
            if l.startswith(f"chorus-{pid}-")]
    shm = [f for f in os.listdir("/dev/shm")
           if any(f.startswith(f"chorus-{q}-") for q in pids)]
    for n in left:
        sh("ip", "netns", "del", n)
    return left + shm

def trial(fault, nodes, np_=4):
    """One job: start, wait for 20 calls, break the last node's network, judge what came back."""
    per = np_ // nodes
    node_of = [min(r // per, nodes - 1) for r in range(np_)]
    bad = nodes - 1
    seconds = {"flap": 8, "loss5": 6, "loss30": 6}.get(fault, 60)
    # Under chorusrun a survivor lingers after its report until every other one reported
    # (chorusrun ends the job at the first failed exit); with a hang, one may wait the bound
    # again twice (a late status answer).
    linger = TIMEOUT * (3 if fault.startswith("hang") else 1) + 3
    # By hand each node starts its ranks with torchrun's variables, nothing watches them, and a
    # survivor exits at its report; under chorusrun a torch rank gets torchrun's variables from
    # scripts/netns_torch_rank.sh.
    # Under torchrun, torchrun starts the interpreter (or the C worker, --no-python).
    program = [worker]
    if TORCH:
        program = ([] if TORCHRUN else [PYTHON]) + ["python/tests/netfault_worker.py"]
    if HAND:
        launch = ["-np", str(nodes), "scripts/netns_node_ranks.sh"]
        launch += (["--torchrun", PYTHON] if TORCHRUN else []) + [str(per)]
    else:
        launch = ["-np", str(np_)] + (["scripts/netns_torch_rank.sh"] if TORCH else [])
    cmd = [chorusrun, "--netns", "--nodes", str(nodes), "--timeout", str(WATCHDOG + 10),
           "-x", f"CHORUS_TIMEOUT={TIMEOUT:g}"] + launch + program + [
           "--seconds", str(seconds), "--watchdog", str(WATCHDOG),
           "--linger-ms", str(0 if HAND else int(linger * 1000))]
    hung, hang_file = np_ - 1, f"/tmp/chorus-nf-hang-{os.getpid()}-{time.monotonic_ns()}"
    if fault.startswith("hang"):
        cmd += ["--hang-rank", str(hung), "--hang-file", hang_file]
    job = Job(cmd)
    p, out, pump = job.p, job.out, job.pump
    start = time.time()
    progressed = set()
    while time.time() - start < STARTUP and p.poll() is None:
        pump()
        for l in out:
            m = re.search(r"PROGRESS rank=(\d+) iter=(\d+)", l)
            if m and int(m.group(2)) >= 20:
                progressed.add(int(m.group(1)))
        if len(progressed) == np_:
            break
        time.sleep(0.02)
    pid = p.pid
    ns = f"chorus-{pid}-node{bad}"
    sw = f"chorus-{pid}-sw"
    dev, swdev = f"v{pid}n{bad}", f"v{pid}s{bad}"
    pids = {}
    for l in out:
        m = re.search(r"READY rank=(\d+) nranks=\d+ pid=(\d+)", l)
        if m:
            pids[int(m.group(1))] = int(m.group(2))
    t0 = mono()
    errs = []
    def run(*c):
        r = sh(*c)
        if r.returncode != 0:
            errs.append(" ".join(c) + ": " + r.stdout.strip())
    if len(progressed) < np_:
        errs.append("the job did not reach 20 calls")
    elif fault == "down":
        run("ip", "netns", "exec", ns, "ip", "link", "set", "dev", dev, "down")
    elif fault == "flap":
        run("ip", "netns", "exec", ns, "ip", "link", "set", "dev", dev, "down")
        time.sleep(1.5)
        run("ip", "netns", "exec", ns, "ip", "link", "set", "dev", dev, "up")
    elif fault == "hangmute":
        # Rank 3 stops calling; as the survivors' timeouts fire, rank 2's node sends no TCP data
        # or ACK for 2 s (connection attempts and refusals pass): its answers to their status
        # queries come only at TCP's next retries, after the answer window.
        open(hang_file, "w").close()
        mns = f"chorus-{pid}-node{node_of[np_ - 2]}"
        time.sleep(max(0.0, t0 + TIMEOUT - 0.3 - mono()))
        nft_drop(run, mns, "inet", "m", "output", "tcp", "flags", "&", "(syn | rst)", "==", "0")
        time.sleep(2.0)
        run("ip", "netns", "exec", mns, "nft", "delete", "table", "inet", "m")
    elif fault.startswith("loss") or fault.startswith("hang"):
        pct = fault[4:]
        if fault.startswith("hang"):
            open(hang_file, "w").close()
        nft_drop(run, ns, "inet", "t", "output", "numgen", "random", "mod", "100", "<", pct)
    elif fault == "drop":
        nft_drop(run, sw, "bridge", "f", "forward", "iifname", swdev)
    elif fault == "gone":
        run("ip", "-n", sw, "link", "del", swdev)
        for r, q in pids.items():
            if node_of[r] == bad:
                os.kill(q, signal.SIGSTOP)
        run("ip", "netns", "del", ns)
    survivors = [r for r in range(np_) if not (fault == "gone" and node_of[r] == bad)
                 and not (fault.startswith("hang") and r == hung)]
    if fault.startswith("hang") or (HAND and fault in FAIL_FAULTS):
        # Every survivor reports (or the deadline passes), then the ranks left are killed: the
        # hung one, a vanished node's stopped ones (by hand nothing else ends them).
        until = mono() + 3 * TIMEOUT + 20
        while mono() < until and p.poll() is None:
            pump()
            if sum("FAILED rank=" in l for l in out) >= len(survivors):
                break
            time.sleep(0.05)
        for r in set(range(np_)) - set(survivors):
            try:
                os.kill(pids[r], signal.SIGKILL)
            except (KeyError, ProcessLookupError):
                pass
        if os.path.exists(hang_file):
            os.unlink(hang_file)
    text = job.finish()
    if os.environ.get("NETFAULT_LOG"):  # the job's whole output, for a look at one trial
        with open(os.environ["NETFAULT_LOG"], "a") as f:
            f.write(f"# trial {fault} {nodes} nodes, fault at t={t0:.6f} (monotonic)\n"
                    + text)
    rc = p.returncode
    if HAND and rc == 0:
        # The nodes' own verdicts: the first rank's exit status that was not 0.
        rc = next((int(m.group(1)) for m in re.finditer(r"NODE node=\d+ status=(\d+)", text)
                   if m.group(1) != "0"), 0)
    reports, wrong, times = {}, [], []
    for l in text.splitlines():
        m = re.search(r"FAILED rank=(\d+) code=\d+ name=(\S+) t=([\d.]+) iter=\d+ culprit=(-?\d+) "
                      r"msg=(.*)", l)
        if m and int(m.group(1)) not in reports:
            reports[int(m.group(1))] = (float(m.group(3)), m.group(5), int(m.group(4)))
    done = {int(m.group(1)) for m in re.finditer(r"DONE rank=(\d+)", text)}
    hang = rc == 124 or "watchdog" in text.lower() and "not finished" in text
    correct = True
    notes = []
    named_hung, named_none = 0, 0  # hangNN: survivors that named the hung rank, that named no one
    unreported = 0  # LAUNCH=torchrun: survivors their agent stopped before they reported
    if fault in FAIL_FAULTS or fault.startswith("hang"):
        # Under torchrun a node's agent stops its other ranks (SIGTERM) once one ended: a
        # survivor it stopped before its report has none, and is counted apart.
        stopped = {int(m.group(1)) for m in
                   re.finditer(r"Sending process (\d+) closing signal SIGTERM", text)}
        for r in survivors:
            if r not in reports and TORCHRUN and pids.get(r) in stopped and reports:
                notes.append(f"rank {r}: stopped by its torchrun agent before its report")
                unreported += 1
                continue
            if r not in reports:
                correct = False
                hang = True
                notes.append(f"rank {r}: no report")
                continue
            t, msg, culprit = reports[r]
            times.append(t - t0)
            if fault.startswith("hang"):
                # The hung rank, alive (not "stopped"), or no one (the network too slow for the
                # bound), never another rank.
                if culprit == hung and "stopped making progress" not in msg:
                    named_hung += 1
                elif culprit == -1 and "too slow" in msg:
                    named_none += 1
                else:
                    correct = False
                    notes.append(f"rank {r} blames {culprit}: {msg[:300]}")
                continue
            want = [n for n in range(nodes) if n != node_of[r]] if node_of[r] == bad else [bad]
            named = re.search(r"network failure: nodes? (.*?) unreachable from rank (\d+)", msg)
            ok = named is not None and int(named.group(2)) == r
            if ok:
                got = [int(x) for x in re.findall(r"(?:^|, | and )(\d+) \(rank", named.group(1))]
                ok = sorted(got) == want
            if not ok:
                correct = False
                notes.append(f"rank {r}: {msg}")
        if fault in FAIL_FAULTS and rc == 0:
            correct = False
        if fault.startswith("hang"):
            notes += [l.strip()[:200] for l in text.splitlines() if "waiting another" in l][:4]
    else:
        wrongs = [l for l in text.splitlines() if "WRONG" in l]
        if rc != 0 or len(done) != np_ or wrongs:
            correct = False
            notes += wrongs[:2] + [l for l in text.splitlines() if "FAILED" in l][:2]
            # The waits that waited again (a stall the timeout found in TCP's backoff), by rank.
            notes += [l.strip()[:200] for l in text.splitlines() if "waiting another" in l][:4]
            if rc != 0 and not notes:
                notes.append(f"chorusrun exit status {rc}")
        times.append(mono() - t0)
    left = leftovers(pid, pids.values())
    return {"fault": fault, "nodes": nodes, "ranks": np_, "rc": rc, "correct": correct,
            "worst_s": round(max(times), 3) if times else None, "hang": hang,
            "leftovers": left, "setup_errors": errs, "notes": notes, "named": named_hung,
            "nobody": named_none, "stopped": unreported,
            "reports": {str(r): reports[r][1] for r in sorted(reports)}}

if args[:1] == ["--trial"]:
    print(json.dumps(trial(args[1], int(args[2]))))
    sys.exit(0)

def benign_job(rng, nodes, np_, seconds, timeout=30):
    # A mix of collectives under loss and short flaps on random nodes: exact, or a failure.
    cmd = [chorusrun, "--netns", "--nodes", str(nodes), "--timeout", str(int(seconds + 120)),
           "-x", f"CHORUS_TIMEOUT={timeout}", "-np", str(np_), worker, "--coll", "Mix",
           "--count", "262144", "--seconds", str(seconds), "--linger-ms", "2000",
           "--watchdog", str(int(seconds + 100))]
    job = Job(cmd)
    p, out, pump = job.p, job.out, job.pump
    t0 = mono()
    while mono() - t0 < 60 and p.poll() is None:
        pump()
        if sum("READY rank=" in l for l in out) == np_:
            break
        time.sleep(0.05)
    pid = p.pid
    faults, errs = [], []
    end = mono() + seconds - 4
    # Every fault heals before the ranks stop (they started their clock at READY): one that
    # outlasted the job would find its namespace gone (seed 205 did, 2026-12-07).
    heal_by = mono() + seconds - 1.5
    hold_for = lambda lo, hi: max(0.0, min(rng.uniform(lo, hi), heal_by - mono()))
    while mono() < end and p.poll() is None:
        pause = rng.uniform(0.5, 3.0)
        while pause > 0 and p.poll() is None:
            pump(); time.sleep(0.1); pause -= 0.1
        if p.poll() is not None or mono() >= end:
            break
        node = rng.randrange(nodes)
        ns, dev = f"chorus-{pid}-node{node}", f"v{pid}n{node}"
        kind = rng.choice(["loss5", "loss30", "flap"])
        def run(*c):
            r = sh(*c)
            # A job that ended (a failure: its rc and reports judge it) took its namespaces along.
            if r.returncode != 0 and p.poll() is None:
                errs.append(" ".join(c) + ": " + r.stdout.strip())
        if kind == "flap":
            hold = hold_for(0.3, 3.0)
            run("ip", "netns", "exec", ns, "ip", "link", "set", "dev", dev, "down")
            time.sleep(hold)
            run("ip", "netns", "exec", ns, "ip", "link", "set", "dev", dev, "up")
        else:
            hold = hold_for(1.0, 5.0)
            nft_drop(run, ns, "inet", "soak", "output", "numgen", "random", "mod", "100", "<",
                     kind[4:])
            time.sleep(hold)
            run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "soak")
        faults.append(f"{kind}@{node}:{hold:.1f}s")
    text = job.finish()
    done = {int(m.group(1)) for m in re.finditer(r"DONE rank=(\d+)", text)}
    iters = [int(m.group(1)) for m in re.finditer(r"DONE rank=\d+ iters=(\d+)", text)]
    bad = [l for l in text.splitlines() if "WRONG" in l or "FAILED" in l or "INITFAILED" in l]
    pids = [int(m.group(1)) for m in re.finditer(r"READY rank=\d+ nranks=\d+ pid=(\d+)", text)]
    left = leftovers(pid, pids)
    ok = p.returncode == 0 and len(done) == np_ and not bad and not errs
    return {"kind": "benign", "shape": f"{nodes}x{np_ // nodes}", "rc": p.returncode, "ok": ok,
            "seconds": round(mono() - t0, 1), "calls": min(iters) if iters else 0,
            "faults": faults, "hang": p.returncode in (124, 137) or "not finished" in text,
            "leftovers": left, "notes": (bad + errs)[:3]}

if args[:1] == ["--soak-job"]:
    import random
    sec, nodes, np_, seed = (int(x) for x in args[1:5])
    print(json.dumps({**benign_job(random.Random(seed), nodes, np_, sec), "seed": seed}))
    sys.exit(0)

if args[:1] == ["--soak"]:
    import random
    minutes = float(args[1]) if len(args) > 1 else 30
    seed = int(args[2]) if len(args) > 2 else int(time.time())
    rng = random.Random(seed)
    print(f"# network soak {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} cores, seed {seed}: scripts/netfault_table.sh {B} --soak "
          f"{minutes:g} {seed}", flush=True)
    stop = mono() + minutes * 60
    jobs, failed, hangs, left, nfaults, calls, named = 0, 0, 0, 0, 0, 0, 0
    kinds = {}
    while mono() < stop:
        jobs += 1
        if jobs % 4 == 0:
            fault = rng.choice(list(FAIL_FAULTS))
            nodes = rng.choice([2, 4])
            r = trial(fault, nodes)
            r["kind"], r["ok"], r["shape"] = f"fatal:{fault}", r["correct"], f"{nodes}x{4 // nodes}"
            named += bool(r["correct"])
        else:
            nodes, np_ = rng.choice([(2, 2), (3, 3), (2, 4), (4, 4)])
            r = benign_job(rng, nodes, np_, rng.randint(20, 40))
            nfaults += len(r["faults"])
            calls += r["calls"]
            for f in r["faults"]:
                kinds[f.split("@")[0]] = kinds.get(f.split("@")[0], 0) + 1
        failed += not r["ok"]
        hangs += bool(r["hang"])
        left += bool(r["leftovers"])
        brief = {k: r.get(k) for k in ("kind", "shape", "ok", "rc", "seconds", "calls", "worst_s",
                                        "faults", "hang", "leftovers", "notes") if k in r}
        print(json.dumps(brief), flush=True)
    verdict = "PASS" if failed == 0 and hangs == 0 and left == 0 else "FAIL"
    print(f"NETSOAK SUMMARY seed={seed} minutes={minutes:g} jobs={jobs} "
          f"benign={jobs - jobs // 4} (faults {nfaults}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
          + f"; checked calls {calls}) fatal={jobs // 4} (named {named}) failed={failed} "
          f"hangs={hangs} leftovers={left} -> {verdict}", flush=True)
    sys.exit(0 if verdict == "PASS" else 1)

trials = int(args[0]) if args else 20
faults = os.environ.get("FAULTS", "down gone drop flap loss5 loss30").split()
shapes = os.environ.get("SHAPES", "2x2 4x1").split()
print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
      f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
print(f"# {'LAUNCH=torchrun ' if TORCHRUN else 'LAUNCH=hand ' if HAND else ''}{'WORKER=torch ' if TORCH else ''}TIMEOUT={TIMEOUT:g} (CHORUS_TIMEOUT) FAULTS='{' '.join(faults)}' SHAPES='{' '.join(shapes)}' "
      f"scripts/netfault_table.sh {B} {trials}")
print()
print("| fault | nodes x ranks | trials | right culprit by every survivor (or exact completion) "
      "| worst detection (or run) time | hangs | leftovers |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
status = 0
examples = []
for fault in faults:
    for shape in shapes:
        nodes = int(shape.split("x")[0])
        res = [trial(fault, nodes) for _ in range(trials)]
        ok = sum(r["correct"] for r in res)
        worst = max((r["worst_s"] or 0) for r in res)
        hangs = sum(r["hang"] for r in res)
        left = sum(bool(r["leftovers"]) for r in res)
        if ok != trials or hangs or left:
            status = 1
        for r in res:
            if not r["correct"] or r["setup_errors"]:
                examples.append(f"{fault} {shape}: {r['setup_errors']} {r['notes'][:6]}")
        kind = "named" if fault in FAIL_FAULTS else "exact"
        if fault.startswith("hang"):
            kind = (f"right (survivor reports: {sum(r['named'] for r in res)} name the hung rank, "
                    f"{sum(r['nobody'] for r in res)} no one)")
        stopped = sum(r["stopped"] for r in res)
        if stopped:  # LAUNCH=torchrun: survivors their agent stopped before they reported
            kind += f"; {stopped} survivor(s) stopped by torchrun before a report"
        print(f"| {fault} | {shape} | {trials} | {ok} of {trials} {kind} | {worst:.2f} s | {hangs} "
              f"| {left} |", flush=True)
        if (fault in FAIL_FAULTS or fault.startswith("hang")) and res:
            sample = res[-1]["reports"]
            examples.append(f"{fault} {shape}, sample messages: " +
                            " || ".join(sample[k] for k in sorted(sample)[:2]))
print()
for e in examples[:24]:
    print("  " + e[:1200])
sys.exit(status)
EOF
