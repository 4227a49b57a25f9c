"""`slurmkit accounts apply` of a big tenants section from empty, the no-change re-apply, and the naive script (one
sacctmgr call per entity), against one real slurmdbd (a 2-node accounting lab), in one run.

    python bench/accounts_bench.py [--slurm 24.11] --port-base 25800 --dir /tmp/accounts-bench \\
        [--users 1000] [--accounts 100] [--qos 20] [--naive-users N]

--naive-users N times the naive script's user calls on the first N users only and scales that part linearly to all
users (said in the table); by default every call runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from slurmkit.lab import Lab, LabSpec


def tenants(users: int, accounts: int, nqos: int, p: str = "") -> dict:
    """Names prefixed with ``p``: the naive script gets its own (slurmdbd keeps an account record after --prune)."""
    orgs = max(1, accounts // 10)
    teams = accounts - orgs
    qos = [{"name": f"{p}q{i:02d}", "priority": 10 * i, "gpus": 2} for i in range(nqos)]
    tree = []
    per_team: list[list[str]] = [[] for _ in range(teams)]
    for u in range(users):
        per_team[u % teams].append(f"{p}u{u:04d}")
    t = 0
    for o in range(orgs):
        children = []
        for _ in range(teams // orgs + (1 if o < teams % orgs else 0)):
            children.append({"name": f"{p}team{t:03d}", "fairshare": 1 + t % 7, "gpus": 2,
                             "qos": [f"{p}q{t % nqos:02d}", f"{p}q{(t + 1) % nqos:02d}"], "users": per_team[t]})
            t += 1
        tree.append({"name": f"{p}org{o:02d}", "children": children})
    return {"qos": qos, "accounts": tree, "user_limits": {"gpus": 1}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slurm", default=None)
    ap.add_argument("--port-base", type=int, default=25800)
    ap.add_argument("--dir", default="/tmp/slurmkit-accounts-bench")
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--accounts", type=int, default=100)
    ap.add_argument("--qos", type=int, default=20)
    ap.add_argument("--naive-users", type=int, default=None)
    a = ap.parse_args()
    lab = Lab(LabSpec(dir=a.dir, port_base=a.port_base, slurm=a.slurm, nodes=2, gpus_per_node=2, nodes_per_leaf=2,
                      accounting=True, tenants={}))
    lab.up(progress=lambda m: print("lab:", m, file=sys.stderr), timeout=120)
    env = {**os.environ, **lab.env}
    try:
        base = yaml.safe_load((lab.etc / "slurmkit.yaml").read_text())
        big = dict(base, tenants=tenants(a.users, a.accounts, a.qos))
        inv = Path(a.dir) / "big.yaml"
        inv.write_text(yaml.safe_dump(big))
        empty = Path(a.dir) / "empty.yaml"
        empty.write_text(yaml.safe_dump(dict(base, tenants={})))

        def accounts(*args: str) -> tuple[float, str]:
            t0 = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "slurmkit.cli.main", "accounts", *args], env=env,
                               capture_output=True, text=True, check=True, timeout=3600)
            return time.monotonic() - t0, r.stdout

        t_apply, out = accounts("apply", str(inv))
        calls = sum(1 for ln in out.splitlines() if ln.startswith("applied:"))
        t_again, out2 = accounts("apply", str(inv))
        assert "no change" in out2, out2
        t_prune, _ = accounts("apply", "--prune", str(empty))

        def sacctmgr(*args: str) -> None:
            subprocess.run(["sacctmgr", "-i", *args], env=env, capture_output=True, check=True, timeout=120)

        tb = tenants(a.users, a.accounts, a.qos, "n")
        t0 = time.monotonic()
        naive_calls = 0
        for q in tb["qos"]:
            sacctmgr("add", "qos", q["name"])
            sacctmgr("modify", "qos", "where", f"name={q['name']}", "set", f"Priority={q['priority']}",
                     "GrpTRES=gres/gpu=2")
            naive_calls += 2
        users: list[tuple[str, dict]] = []
        for org in tb["accounts"]:
            sacctmgr("add", "account", org["name"], "cluster=lab")
            naive_calls += 1
            for team in org["children"]:
                sacctmgr("add", "account", team["name"], "cluster=lab", f"parent={org['name']}",
                         f"fairshare={team['fairshare']}", "GrpTRES=gres/gpu=2", f"qos={','.join(team['qos'])}")
                naive_calls += 1
                users += [(u, team) for u in team["users"]]
        t_entities = time.monotonic() - t0
        sample = users if a.naive_users is None else users[: a.naive_users]
        t1 = time.monotonic()
        for u, team in sample:
            sacctmgr("add", "user", u, f"account={team['name']}", "cluster=lab", "GrpTRES=gres/gpu=1",
                     f"qos={','.join(team['qos'])}")
        t_users = time.monotonic() - t1
        scaled = t_users * len(users) / max(1, len(sample))
        naive = t_entities + scaled
        naive_calls += len(users)
        note = "" if len(sample) == len(users) else f" (users: {len(sample)} timed, scaled to {len(users)})"
        print(f"Slurm {lab.release}: {a.users} users / {a.accounts} accounts / {a.qos} QOS; Python "
              f"{sys.version.split()[0]}")
        print("| run | sacctmgr calls | seconds |")
        print("|---|---:|---:|")
        print(f"| slurmkit accounts apply, from empty | {calls} (+6 reads) | {t_apply:.1f} |")
        print(f"| slurmkit accounts apply, no change | 0 (+3 reads) | {t_again:.1f} |")
        print(f"| slurmkit accounts apply --prune to empty | - | {t_prune:.1f} |")
        print(f"| naive script, one call per entity{note} | {naive_calls} | {naive:.1f} |")
        print(f"speed-up from empty: {naive / t_apply:.1f}x")
    finally:
        lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
