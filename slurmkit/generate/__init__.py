"""Config generation: pure functions from the Cluster model to file texts."""

from slurmkit.generate.slurmconf import EXECUTABLE_FILES, Overrides, generate  # noqa: F401
