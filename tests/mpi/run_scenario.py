#!/usr/bin/env python3
"""Runs one multi-rank scenario: mpi_model under a real `mpirun -np 4` (bounded by a timeout), then nanscope-merge
--json on the ranks' evidence, and checks the answer known in advance (the fault was injected at a known place).

  run_scenario.py --model PATH --merge PATH --work DIR SCENARIO

Exit 0: as expected; 1: not; 77: skipped (mpirun missing, or the model was not built: no MPI headers).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

SKIP = 77

# name -> (model arguments, expected merge exit, checks on the merge JSON and the run)
# origins: [(rank, step, module_path, tensor, kind)]; receivers: ranks; chain: [(kind, from, to)]
SCENARIOS = {
    # NaN made on rank 2 at step 5 in model.layer0, before the step's first all-reduce: everybody receives it.
    "allreduce_nan": dict(
        args=["--fault", "2:5:layer0:nan", "--write-at-exit"], rc=1,
        origins=[(2, 5, "model.layer0", "output", "produced")], receivers=[0, 1, 3],
        chain=[("all_reduce", [2], [0, 1, 3])], later=[]),
    # Inf made after the step's last collective (the local loss): it stays on rank 1.
    "local_inf": dict(
        args=["--fault", "1:5:head:inf", "--write-at-exit"], rc=1,
        origins=[(1, 5, "model.head", "output", "produced")], receivers=[], chain=[], later=[], local_only=True),
    # Two producers in step 5: rank 1's probe (local, before the first all-reduce) happens before rank 3's layer1
    # (after it); rank 3's NaN then reaches every rank through the second all-reduce. The earlier one wins.
    "two_producers_ordered": dict(
        args=["--fault", "1:5:probe0:nan", "--fault", "3:5:layer1:nan", "--write-at-exit"], rc=1,
        origins=[(1, 5, "model.probe0", "output", "produced")], receivers=[0, 2],
        chain=[("all_reduce", [3], [0, 1, 2])], later=[(3, 5, "model.layer1", "output", "produced")]),
    # Two producers before the same all-reduce: concurrent, both named.
    "two_producers_concurrent": dict(
        args=["--fault", "1:5:probe0:nan", "--fault", "3:5:layer0:nan", "--write-at-exit"], rc=1,
        origins=[(1, 5, "model.probe0", "output", "produced"), (3, 5, "model.layer0", "output", "produced")],
        receivers=[0, 2], chain=[("all_reduce", [3], [0, 1, 2])], later=[]),
    # NaN in the input data of rank 0.
    "input_data": dict(
        args=["--fault", "0:5:data:nan", "--write-at-exit"], rc=1,
        origins=[(0, 5, "model.layer0", "input[0]", "input")], receivers=[1, 2, 3],
        chain=[("all_reduce", [0], [1, 2, 3])], later=[]),
    # Pipeline: NaN made in stage 1, carried to stage 2 and on to stage 3 by send/recv.
    "pipeline": dict(
        args=["--mode", "pipe", "--fault", "1:5:stage:nan", "--write-at-exit"], rc=1,
        origins=[(1, 5, "pipe.stage1", "output", "produced")], receivers=[2, 3],
        chain=[("send/recv", [1], [2]), ("send/recv", [2], [3])], later=[]),
    # Rank 2 makes the NaN at step 5 and is killed with SIGKILL at the start of step 6; nobody writes at exit
    # (the other ranks are killed by mpirun or time out): the files written at detection suffice.
    "sigkill": dict(
        args=["--fault", "2:5:layer0:nan", "--kill", "2:6"], rc=1, run_may_fail=True,
        origins=[(2, 5, "model.layer0", "output", "produced")], receivers=[0, 1, 3],
        chain=[("all_reduce", [2], [0, 1, 3])], later=[], killed=2),
    # All-stop on: a local NaN on rank 2 at step 5 makes every rank stop after step 5 and dump its ring.
    "allstop_on": dict(
        args=["--fault", "2:5:probe0:nan", "--all-stop", "--steps", "10"], rc=1,
        origins=[(2, 5, "model.probe0", "output", "produced")], receivers=[], chain=[], later=[],
        completed=6, stop_step=5, stop_collectives=6),
    # All-stop on, and the ranks go on after it (a print-and-continue engine): they stop once, at step 5, not at
    # every later step.
    "allstop_continue": dict(
        args=["--fault", "2:5:probe0:nan", "--all-stop", "--continue-after-stop", "--steps", "10"], rc=1,
        origins=[(2, 5, "model.probe0", "output", "produced")], receivers=[], chain=[], later=[],
        completed=10, stop_step=5, stop_collectives=10, stops=1),
    # All-stop with the engine setting each step itself (auto_step off): the stop is at the NaN's step.
    "allstop_manual": dict(
        args=["--fault", "2:5:probe0:nan", "--all-stop", "--manual-steps", "--steps", "10"], rc=1,
        origins=[(2, 5, "model.probe0", "output", "produced")], receivers=[], chain=[], later=[],
        completed=6, stop_step=5, stop_collectives=6, stops=1),
    # All-stop off: the same fault; the others run to the end and (not asked to write at exit) leave no file.
    "allstop_off": dict(
        args=["--fault", "2:5:probe0:nan", "--steps", "10"], rc=3, missing=[0, 1, 3],
        origins=[(2, 5, "model.probe0", "output", "produced")], receivers=[], chain=[], later=[],
        completed=10, stop_collectives=0),
    # No fault at all.
    "clean": dict(args=["--write-at-exit"], rc=0, origins=[], receivers=[], chain=[], later=[], completed=8),
}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def mpirun_flavour(mpirun):
    """("openmpi", major version) or ("other", 0), from `mpirun --version`."""
    try:
        v = subprocess.run([mpirun, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ("other", 0)
    text = v.stdout.decode("utf-8", "replace")
    m = re.search(r"Open MPI\)?\s+(\d+)\.", text)
    if m:
        return ("openmpi", int(m.group(1)))
    return ("other", 0)


def mpirun_command(mpirun, model, extra):
    cmd = ["timeout", "-k", "5", "60", mpirun, "-np", "4"]
    flavour, major = mpirun_flavour(mpirun)
    if flavour == "openmpi":
        cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        if major < 5:
            # shared memory and self only: containers without a network, CI runners with 2 cores
            cmd += ["--mca", "btl", "self,vader", "--mca", "btl_vader_single_copy_mechanism", "none"]
    return cmd + [model] + extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--merge", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    a = ap.parse_args()
    sc = SCENARIOS[a.scenario]

    mpirun = shutil.which(a.mpirun)
    if mpirun is None:
        print("SKIPPED: mpirun not found")
        return SKIP
    if not a.model or a.model == "NONE" or not os.path.isfile(a.model):
        print("SKIPPED: the MPI test model was not built (no MPI headers/compiler at configure time)")
        return SKIP
    if shutil.which("timeout") is None:
        print("SKIPPED: no timeout command to bound mpirun")
        return SKIP

    out = os.path.join(a.work, a.scenario)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ)
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    # Open MPI's own allocations are not ours to judge
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    cmd = mpirun_command(mpirun, a.model, ["--out", out] + sc["args"])
    print("+ " + " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=120)
    run_out = p.stdout.decode("utf-8", "replace")
    print(run_out[-4000:])
    if p.returncode == 124:
        if not sc.get("run_may_fail"):
            fail("mpirun timed out")
    elif p.returncode != 0 and not sc.get("run_may_fail"):
        fail("mpirun exited %d" % p.returncode)
    if sc.get("run_may_fail") and p.returncode == 0:
        fail("the killed run exited 0")

    completed = {}
    for line in run_out.splitlines():
        parts = line.split()
        if len(parts) >= 10 and parts[0] == "rank" and parts[2] == "completed":
            completed[int(parts[1].rstrip(":"))] = (int(parts[3]), int(parts[7]), int(parts[9]))
    if "completed" in sc:
        if sorted(completed) != [0, 1, 2, 3]:
            fail("not every rank finished: %s" % completed)
        for r, (n, coll, stops) in completed.items():
            if n != sc["completed"]:
                fail("rank %d completed %d steps, expected %d" % (r, n, sc["completed"]))
            if "stop_collectives" in sc and coll != sc["stop_collectives"]:
                fail("rank %d issued %d all-stop collectives, expected %d" % (r, coll, sc["stop_collectives"]))
            if "stops" in sc and stops != sc["stops"]:
                fail("rank %d's all-stop said stop %d times, expected %d" % (r, stops, sc["stops"]))
    if "killed" in sc and sc["killed"] in completed:
        fail("rank %d was to be killed but finished" % sc["killed"])

    # every evidence file is complete JSON (atomic writes), no temporary file left by a finished writer
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if name.startswith("nanscope_evidence_"):
            with open(path) as f:
                ev = json.load(f)
            if ev["format"] != "nanscope-rank-evidence" or ev["world_size"] != 4:
                fail("%s: unexpected header" % name)
            if "stop_step" in sc:
                if ev["stop"] is None or ev["stop"]["step"] != sc["stop_step"] or ev["reason"] != "all-stop":
                    fail("%s: stop %s reason %s, expected an all-stop at step %d" %
                         (name, ev["stop"], ev["reason"], sc["stop_step"]))
                if max(e["step"] for e in ev["events"]) != sc["stop_step"]:
                    fail("%s: events after the all-stop step" % name)

    m = subprocess.run([a.merge, "--json", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    print("+ nanscope-merge --json %s -> exit %d" % (out, m.returncode))
    print(m.stdout.decode()[-6000:])
    if m.returncode != sc["rc"]:
        fail("nanscope-merge exited %d, expected %d; stderr: %s" % (m.returncode, sc["rc"], m.stderr.decode()))
    res = json.loads(m.stdout)
    got_origins = [(o["rank"], o["step"], o["module_path"], o["tensor"], o["kind"]) for o in res["origins"]]
    if got_origins != [tuple(o) for o in sc["origins"]]:
        fail("origins %s, expected %s" % (got_origins, sc["origins"]))
    got_later = [(o["rank"], o["step"], o["module_path"], o["tensor"], o["kind"]) for o in res["later_producers"]]
    if got_later != [tuple(o) for o in sc["later"]]:
        fail("later producers %s, expected %s" % (got_later, sc["later"]))
    if res["receivers"] != sc["receivers"]:
        fail("receivers %s, expected %s" % (res["receivers"], sc["receivers"]))
    got_chain = [(c["kind"], c["from"], c["to"]) for c in res["chain"]]
    if got_chain != [tuple(c) for c in sc["chain"]]:
        fail("chain %s, expected %s" % (got_chain, sc["chain"]))
    for c in res["chain"]:
        if c["step"] != 5:
            fail("a carrier outside step 5: %s" % c)
    if res["concurrent"] != (len(sc["origins"]) > 1):
        fail("concurrent flag %s" % res["concurrent"])
    if sc.get("local_only") and not res["local_only"]:
        fail("expected local_only")
    if res["ranks_missing"] != sc.get("missing", []):
        fail("missing ranks %s, expected %s" % (res["ranks_missing"], sc.get("missing", [])))
    # the text form agrees with the JSON (same exit status, names the first origin)
    t = subprocess.run([a.merge, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if t.returncode != sc["rc"]:
        fail("text mode exited %d" % t.returncode)
    text = t.stdout.decode()
    print(text)
    if sc["origins"] and ("rank %d, step 5, %s" % (sc["origins"][0][0], sc["origins"][0][2])) not in text:
        fail("the text does not name the origin")
    print("OK: %s" % a.scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main())
