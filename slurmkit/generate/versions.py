"""The generator's view of the release facts in ``slurmkit.release`` (kept so generator code reads
``versions.features_for``); every fact and its source lives there."""

from __future__ import annotations

from slurmkit.release import SlurmFeatures, _key, features_for, version_key

__all__ = ["SlurmFeatures", "_key", "features_for", "version_key"]
