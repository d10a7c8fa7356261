#!/usr/bin/env python3
"""nanscope-merge against recorded answers on many small random evidence sets (no MPI needed).

The cases are generated here, deterministically (a splitmix64 generator of our own, so the files do not depend on
the Python version): random worlds of 1..9 ranks with frames, checkpoints, collectives on the world and on
sub-communicators (with and without "members", members in any order, sometimes repeated), send/recv chains,
NaN/Inf injected and propagated, ties, local faults, reductions that overflow, missing ranks, crashed ranks
(events cut short), dropped ring prefixes, events swapped so that the marks disagree between ranks (cycles in the
happens-before graph), and a few damaged sets (conflicting sequence numbers, world sizes that disagree, two files
for one rank).

For every case the tool runs twice (text and --json) with DIR given relative to the case root; the exit status
and a SHA-256 digest of stdout and stderr are compared with merge_golden.json. The recorded answers were made
with nanscope-merge as of commit d57a891 (the pairwise-search version), so that the indexed version is held to
its exact output.

  merge_golden.py --merge PATH [--work DIR] [--record] [--keep] [--only N]

--record rewrites merge_golden.json from the binary given (only to be done with a binary known to be right).
Exit 0: every case matches; 1: some do not (each printed with its output).
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "merge_golden.json")
N_CASES = 700
MASK = (1 << 64) - 1


class Rng:
    """splitmix64: the same numbers on every Python version."""

    def __init__(self, seed):
        self.x = seed & MASK

    def next(self):
        self.x = (self.x + 0x9E3779B97F4A7C15) & MASK
        z = self.x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n

    def chance(self, per_mille):
        return self.below(1000) < per_mille

    def pick(self, seq):
        return seq[self.below(len(seq))]

    def shuffled(self, seq):
        out = list(seq)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out


def health(bad):
    return {"dtype": "f32", "shape": [4], "count": 4, "nan": 1 if bad else 0, "pos_inf": 0, "neg_inf": 0,
            "nonfinite": bool(bad)}


KINDS = ["all_reduce", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "gather",
         "scatter", "barrier"]


def make_case(seed):
    """One random evidence set: {file name: JSON text}."""
    g = Rng(seed * 7919 + 17)
    world = 1 + g.below(9) if seed % 10 else 2 + g.below(16)
    n_ops = 3 + g.below(40 if seed % 10 else 90)
    # communicators: name -> members (world ranks, index = communicator rank), how "members" is written
    comms = {}
    style = g.below(3)  # 0: omitted, 1: [], 2: explicit
    comms["world"] = (list(range(world)), "omit" if style == 0 else "empty" if style == 1 else "list")
    for k in range(g.below(4)):
        size = 1 + g.below(world)
        mem = g.shuffled(range(world))[:size]
        if g.chance(300):
            mem.sort()
        if g.chance(30) and size >= 2:
            mem[1] = mem[0]  # a repeated member: two communicator ranks name one world rank
        comms["sub%d" % k] = (mem, "list")
    if world >= 2 and g.chance(150):
        # a communicator of the first ranks without a members list (communicator rank = world rank)
        comms["low"] = (list(range(1 + g.below(world))), "omit")
    names = sorted(comms)

    events = [[] for _ in range(world)]
    order = [g.below(3) for _ in range(world)]
    coll_seq = {}
    p2p_seq = {}
    bad = [False] * world
    step = 0
    faults = set()
    for _ in range(0 if g.chance(120) else 1 + g.below(5)):
        faults.add((g.below(n_ops), g.below(world), g.pick(["produce", "produce", "input", "transfer", "reduce"])))
    noise = g.below(4) == 0  # flags flipped at random, beyond the propagation

    def add(r, ev):
        order[r] += 1 + (g.below(3) if g.chance(200) else 0)
        ev["order"] = order[r]
        ev["step"] = step + (1 if g.chance(40) else 0)
        events[r].append(ev)

    def flip(b):
        return (not b) if noise and g.chance(60) else b

    for op in range(n_ops):
        if g.chance(120):
            step += 1
        if g.chance(30):
            bad = [False] * world  # a skipped batch: values clean again
        # a fault fires at the first operation of its kind on its rank from its start on
        fr = {}
        for f in sorted(faults):
            if f[0] <= op and f[1] not in fr:
                fr[f[1]] = f[2]
        fired = set()

        def hit(r, kinds):
            if fr.get(r) in kinds:
                fired.add(r)
                return True
            return False
        what = g.below(100)
        if what < 45 or world == 1 and what < 80:
            r = g.below(world)
            in_bad = bad[r] or hit(r, ("input",))
            out_bad = hit(r, ("produce",)) or in_bad
            ckpt = g.chance(60)
            tensors = []
            if not ckpt:
                if g.chance(200):
                    tensors.append({"role": "parameter", "context": "weight", "allowed": False,
                                    "health": health(flip(False))})
                if not g.chance(100):
                    tensors.append({"role": "input", "context": "input[0]", "allowed": False,
                                    "health": health(flip(in_bad))})
                if g.chance(100):
                    tensors.append({"role": "input", "context": "mask", "tensor": False})
                allowed = g.chance(50)
                tensors.append({"role": "output", "context": "output", "allowed": allowed,
                                "health": health(flip(out_bad))})
                if allowed:
                    out_bad = in_bad
            else:
                tensors.append({"role": "checkpoint", "context": "ckpt", "allowed": False,
                                "health": health(flip(out_bad))})
            bad[r] = out_bad
            add(r, {"type": "checkpoint" if ckpt else "frame", "module_path": "m.l%d" % g.below(5),
                    "class": g.pick(["Linear", "ReLU", ""]), "complete": not g.chance(50), "tensors": tensors})
        elif what < 75:
            cname = g.pick(names)
            mem, wstyle = comms[cname]
            kind = g.pick(KINDS)
            seq = coll_seq.get(cname, 0)
            coll_seq[cname] = seq + (2 if g.chance(20) else 1)
            ins = [hit(m, ("transfer",)) or bad[m] for m in mem]
            out = any(ins) if kind not in ("broadcast", "scatter") else ins[0]
            if any([hit(m, ("reduce",)) for m in mem]):
                out = True
            site = g.pick(["", "model", "grads"])
            seen = set()
            for cr, m in enumerate(mem):
                if m in seen:
                    continue  # a repeated member: one record per world rank
                seen.add(m)
                ev = {"type": "collective", "kind": kind, "comm": cname, "comm_size": len(mem), "comm_rank": cr,
                      "seq": seq, "site": site}
                if wstyle == "list":
                    ev["members"] = list(mem)
                elif wstyle == "empty":
                    ev["members"] = []
                if not g.chance(40):
                    ev["input"] = health(flip(ins[cr]))
                if not g.chance(40):
                    ev["output"] = health(flip(out))
                add(m, ev)
                bad[m] = out
        else:
            cname = g.pick(names)
            mem, wstyle = comms[cname]
            a = g.below(len(mem))
            b = g.below(len(mem))
            if a == b and len(mem) > 1 and not g.chance(100):
                b = (a + 1) % len(mem)
            tag = g.below(2)
            sk = (cname, mem[a], b, tag, "s")
            rk = (cname, mem[b], a, tag, "r")
            sseq = p2p_seq.get(sk, 0)
            rseq = p2p_seq.get(rk, 0)
            p2p_seq[sk] = sseq + 1
            p2p_seq[rk] = rseq + 1
            if g.chance(25):
                rseq += 1  # the pair does not match
            sbad = hit(mem[a], ("transfer",)) or bad[mem[a]]
            rbad = sbad if not g.chance(30) else not sbad
            common = {"comm": cname, "comm_size": len(mem), "site": g.pick(["", "pipe"])}
            if wstyle == "list":
                common["members"] = list(mem)
            elif wstyle == "empty":
                common["members"] = []
            send = dict(common, type="send", kind="send", comm_rank=a, peer=b, tag=tag, seq=sseq,
                        input=health(flip(sbad)))
            recv = dict(common, type="recv", kind="recv", comm_rank=b, peer=a, tag=tag, seq=rseq,
                        output=health(flip(rbad)))
            if g.chance(40):
                del recv["output"]
            if g.chance(30):
                recv["input"] = health(False)
            drop_send = g.chance(30)
            if not drop_send:
                add(mem[a], send)
            add(mem[b], recv)
            bad[mem[b]] = rbad or bad[mem[b]]
        faults = {f for f in faults if not (f[0] <= op and f[1] in fired and fr.get(f[1]) == f[2])}

    # perturbations: events swapped on a rank (the marks disagree: cycles), rings cut, files missing
    for r in range(world):
        evs = events[r]
        if len(evs) >= 2 and g.chance(80):
            i = g.below(len(evs) - 1)
            evs[i], evs[i + 1] = evs[i + 1], evs[i]
            evs[i]["order"], evs[i + 1]["order"] = evs[i + 1]["order"], evs[i]["order"]
    files = {}
    missing = set()
    if world > 1 and g.chance(120):
        missing.add(g.below(world))
    for r in range(world):
        if r in missing:
            continue
        evs = events[r]
        dropped = 0
        if evs and g.chance(60):
            dropped = 1 + g.below(len(evs))
            evs = evs[dropped:]
        elif g.chance(30):
            dropped = 3
        if evs and g.chance(50):
            evs = evs[:g.below(len(evs) + 1)]  # crashed: the file was written earlier
        doc = {"format": "nanscope-rank-evidence", "version": 1, "rank": r, "world_size": world,
               "rank_source": "explicit", "host": "h%d" % r, "pid": 100 + r,
               "reason": g.pick(["detection", "exit", "all-stop", "transfer"]), "step": step,
               "dropped_events": dropped, "detection": None, "stop": None, "events": evs}
        if g.chance(40):
            doc["stop"] = {"step": step, "reason": "detected on another rank"}
        files["nanscope_evidence_rank%dof%d.json" % (r, world)] = doc

    # a few damaged sets
    damage = g.below(100) if seed % 7 == 3 else 100
    names_sorted = sorted(files)
    if names_sorted and damage < 20:
        victim = files[g.pick(names_sorted)]
        colls = [e for e in victim["events"] if e["type"] == "collective"]
        if colls:
            e = g.pick(colls)
            e["kind"] = "barrier" if e["kind"] != "barrier" else "all_reduce"
    elif names_sorted and damage < 30:
        victim = files[g.pick(names_sorted)]
        colls = [e for e in victim["events"] if e["type"] == "collective"]
        if colls:
            victim["events"].append(dict(colls[0], order=10 ** 6))
    elif names_sorted and damage < 40:
        files[g.pick(names_sorted)]["world_size"] = world + 1
    elif names_sorted and damage < 50:
        n = g.pick(names_sorted)
        files[n.replace(".json", "_copy.json")] = json.loads(json.dumps(files[n]))
    elif names_sorted and damage < 60:
        victim = files[g.pick(names_sorted)]
        p2p = [e for e in victim["events"] if e["type"] in ("send", "recv")]
        if p2p:
            victim["events"].append(dict(p2p[0], order=10 ** 6))
    elif names_sorted and damage < 65:
        victim = files[g.pick(names_sorted)]
        colls = [e for e in victim["events"] if e["type"] == "collective"]
        if colls:
            e = g.pick(colls)
            e["members"] = list(range(e["comm_size"]))[::-1]
    return {n: json.dumps(d, indent=1 if g.chance(500) else None) for n, d in files.items()}


def digest(rc, out, err):
    """'<exit status> <16 hex digits of SHA-256 over stdout, a NUL, stderr>'."""
    return "%d %s" % (rc, hashlib.sha256(out + b"\0" + err).hexdigest()[:16])


def run_case(merge, root, i):
    case = "case%03d" % i
    d = os.path.join(root, case)
    os.makedirs(d)
    for n, text in make_case(i).items():
        with open(os.path.join(d, n), "w") as f:
            f.write(text)
    got = {}
    outputs = {}
    for mode, extra in (("text", []), ("json", ["--json"])):
        p = subprocess.run([merge] + extra + [case], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120)
        got[mode] = digest(p.returncode, p.stdout, p.stderr)
        outputs[mode] = (p.stdout + p.stderr).decode("utf-8", "replace")
    return got, outputs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--merge", required=True)
    ap.add_argument("--work")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the generated cases")
    ap.add_argument("--only", type=int, help="run one case")
    a = ap.parse_args()
    merge = os.path.abspath(a.merge)
    root = tempfile.mkdtemp(prefix="nanscope_merge_golden_", dir=a.work)
    expected = {}
    if not a.record:
        with open(GOLDEN) as f:
            expected = json.load(f)["cases"]
    results = {}
    bad = 0
    exits = {}
    try:
        for i in ([a.only] if a.only is not None else range(N_CASES)):
            got, outputs = run_case(merge, root, i)
            got = got["text"] + " " + got["json"]
            results["%03d" % i] = got
            rc = int(got.split()[0])
            exits[rc] = exits.get(rc, 0) + 1
            if not a.record and expected.get("%03d" % i) != got:
                bad += 1
                print("MISMATCH case%03d: expected %s, got %s" % (i, expected.get("%03d" % i), got))
                print(outputs["text"])
    finally:
        if a.keep:
            print("cases kept in " + root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    if a.record:
        with open(GOLDEN, "w") as f:
            json.dump({"generator": "tests/mpi/merge_golden.py", "recorded_with": "nanscope-merge at d57a891",
                       "format": "case: text mode's '<exit> <digest>', then --json mode's",
                       "cases": results}, f, indent=0, sort_keys=True)
            f.write("\n")
    print("%d cases, exit statuses %s, %d mismatches" % (len(results), dict(sorted(exits.items())), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
