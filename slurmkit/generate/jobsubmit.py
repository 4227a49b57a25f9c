"""``submit_policy:`` -> ``job_submit.lua`` for Slurm's Lua job-submit plugin. Pure: returns the script's text.

Every job passes this plugin (sbatch, srun, salloc, gpusub), so the site policy holds for jobs that never saw
gpusub. The script only reads and writes ``job_desc`` fields the target release's plugin exposes: the names
below are in ``_get_job_req_field`` (read) and ``_set_job_req_field`` (write) of
src/plugins/job_submit/lua/job_submit_lua.c, identical for them at slurm-22-05-8-1 and slurm-24-11-5-1
(``tres_per_node``/``tres_per_job``/``tres_per_task``/``tres_per_socket``, ``cpus_per_tres``, ``mem_per_tres``,
``cpus_per_task``, ``min_mem_per_node``/``min_mem_per_cpu`` (read only: nil when no memory was asked),
``min_nodes``, ``time_limit``, ``req_switch``, ``wait4switch``, ``partition``). What differs is the form of the
TRES strings: 22.05's clients write ``gres:gpu:N`` (src/common/slurm_opt.c, slurm-22-05-8-1: ``cpus_per_tres``
"gres:gpu:%d"), 24.11's ``gres/gpu:N`` (slurm_opt.c, slurm-24-11-5-1); the script writes the target release's
form and reads both. Unset numbers are ``NO_VAL``/``NO_VAL16`` (src/api/init_msg.c slurm_init_job_desc_msg, both
releases), exported to Lua as ``slurm.NO_VAL``/``slurm.NO_VAL16`` (src/lua/slurm_lua.c, both releases).

The time rule refuses a GPU job whose time limit is none (0 or ``INFINITE``: ``-t 0`` and ``--time=UNLIMITED``) and
accepts one without ``--time`` (``NO_VAL``) where every partition it may land in has a finite DefaultTime, read from
the plugin's ``part_list`` (``default_time``, _part_rec_field in job_submit_lua.c at both tags). ``slurm_job_modify``
applies the same rules to the job as it will be after an update: job_desc holds only the updated fields, job_rec
the job's current ones (src/lua/slurm_lua.c slurm_lua_job_record_field, both tags); the template cites the lines.

With per-type GPU quotas in ``tenants:`` the script adds the GPU type to an untyped GPU request (the one type of
the job's partitions; several: refused, asking for one): Slurm charges an untyped request to gres/gpu only, so a
``gres/gpu:<type>`` limit would not hold it (doc/html/resource_limits.shtml "Specific limits over GRES", 22.05 and
24.11, which suggests this plugin). The type goes in the ``tres_per_*`` string as ``gres:gpu:<type>:N`` (22.05) /
``gres/gpu:<type>:N`` (24.11), the form _get_next_gres parses (src/common/gres.c at slurm-22-05-8-1,
src/interfaces/gres.c at slurm-24-11-5-1); an untyped ``cpus_per_tres``/``mem_per_tres`` beside it is merged into
the typed record by slurmctld (_merge_generic_data, same files).

A tenant's default QOS is not here: the association's DefaultQOS (``accounts apply``) is applied by slurmctld
itself when a job names no QOS, with or without this plugin.
"""

from __future__ import annotations

from slurmkit import hostlist
from slurmkit.generate.versions import features_for
from slurmkit.model.cluster import Cluster, NodeGroup
from slurmkit.release import release_key
from slurmkit.templates import environment, header_line


def tres_gpu_prefix(version: str) -> str:
    """How the release's clients spell the GPU TRES in ``cpus_per_tres``/``mem_per_tres``/``tres_per_*``:
    ``gres:gpu`` until 23.02, ``gres/gpu`` from 23.11 (slurm_opt.c at slurm-23-02-7-1 / slurm-23-11-0-1)."""
    return "gres/gpu" if release_key(version) >= (23, 11) else "gres:gpu"


def _leaf_nodes(cluster: Cluster, hosts: set[str]) -> int:
    """The most of ``hosts`` under one leaf switch (topology/tree): the largest job that can fit one leaf."""
    best = 0
    for sw in cluster.topology.switches:
        if sw.nodes:
            best = max(best, len(hosts & set(hostlist.expand(sw.nodes))))
    return best


def partition_facts(cluster: Cluster) -> list[dict[str, object]]:
    """Per partition: GPU or CPU-only, the per-GPU CPU and memory defaults (the smallest share over its node
    shapes, as DefCpuPerGPU/DefMemPerGPU: ``slurmconf.per_gpu_defaults``) and its largest one-leaf node count."""
    from slurmkit.generate.slurmconf import _gpu_types, cpu_job_mem_default, per_gpu_defaults

    pol = cluster.submit_policy
    assert pol is not None
    out = []
    for p in cluster.partitions:
        groups: list[NodeGroup] = cluster.partition_groups(p)
        gpu_groups = [g for g in groups if g.gpus]
        kind = "gpu" if len(gpu_groups) == len(groups) else "cpu" if not gpu_groups else "mixed"
        cpg, mpg = per_gpu_defaults(groups)
        hosts = {h for g in groups for h in g.hostnames}
        leaf = _leaf_nodes(cluster, hosts) if pol.one_leaf_if_fits else 0
        # auto (0) on a partition with a shape that has fewer usable CPUs than GPUs: per_gpu_defaults gives 0, the
        # script sets no CPU default there (1 per GPU would make a whole-node GPU job unschedulable) and says why
        auto_none = [what for what, setting, share in (("cpus_per_gpu", pol.cpus_per_gpu, cpg),
                                                        ("mem_per_gpu", pol.mem_per_gpu, mpg))
                     if setting == 0 and gpu_groups and share == 0]
        out.append({
            "name": p.name,
            "kind": kind,
            "cpus_per_gpu": (pol.cpus_per_gpu or cpg) if pol.cpus_per_gpu is not None else 0,
            "mem_per_gpu": (pol.mem_per_gpu or mpg) if pol.mem_per_gpu is not None else 0,
            "leaf_nodes": leaf if leaf > 1 else 0,
            "def_mem_per_cpu": cpu_job_mem_default(groups),
            "auto_none": auto_none,
            # the gres types slurmd reports there (gres.conf Type=, a MIG profile per slice), sorted
            "gpu_types": sorted({t for g in gpu_groups for t, _n in _gpu_types(g)}),
        })
    return out


def lua_string(s: str) -> str:
    """A Lua string literal (names reaching here are ``[A-Za-z0-9_.-]+`` already; quoted all the same)."""
    return '"' + "".join(c if c.isalnum() or c in "_.-/: " else f"\\{ord(c):03d}" for c in s) + '"'


def job_submit_lua(cluster: Cluster, version: str | None = None) -> str:
    """The job_submit.lua text for ``cluster.submit_policy`` and the target release."""
    pol = cluster.submit_policy
    assert pol is not None
    ver = features_for(version or cluster.slurm_version).version
    env = environment("conf_templates")
    env.filters["lua"] = lua_string
    default = cluster.default_partition
    return env.get_template("job_submit.lua.j2").render(
        header=header_line(cluster.source_sha256, "--"),
        slurm_version=ver,
        policy=pol,
        partitions=partition_facts(cluster),
        default_partition=default.name if default else "",
        tres_gpu=tres_gpu_prefix(ver),
        typed_quotas=bool(cluster.tenants and cluster.tenants.typed_quotas),
        modify_user_msg=features_for(ver).lua_modify_user_msg,
    )
