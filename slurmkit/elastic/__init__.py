"""Elastic capacity: nodes that join and leave a running cluster (`slurmkit nodes add|remove`).

``edit`` (pure) changes the inventory; ``path`` (pure) chooses how a release takes the change; ``change`` (I/O)
writes the files and the inventory copy as one set and brings the cluster along, or puts both back.
"""
