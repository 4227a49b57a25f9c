"""Cluster acceptance: all-reduce bus bandwidth per node, pair, leaf and the whole set, as Slurm jobs; outliers by
the measured distribution and the inventory's expectations; bisection names the slow node in O(log n) jobs.

    busbw.py    bandwidth math (nccl-tests' definitions), the outlier rule, expected values, nccl-tests parsing
    plan.py     the levels and the bisection: a generator of measurement batches (pure)
    measure.py  the program each job runs (also by hand, without Slurm)
    runner.py   jobs through gpusub's render/submit, the resumable report, drain
    report.py   JSON document, table, PNG
"""
