"""The tenant preflight's per-user cache of slurmdbd's answers (jobs/tenant.py): mode, TTL, trust.

What the cache saves and when it is bypassed, against a real slurmdbd:
tests/integration/test_gpusub_tenant_cache_lab.py."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from slurmkit.jobs import tenant


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "slurmkit" / "gpusub-tenant.json"


def test_written_0600_in_a_0700_dir_and_served_within_the_ttl(cache_home: Path) -> None:
    entry = {"stamp": "team-a/root#normal", "assoc": "team-a||normal|normal\n", "qos": "normal|\n"}
    tenant._cache_put("k", entry)
    assert stat.S_IMODE(cache_home.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache_home.parent.stat().st_mode) == 0o700
    assert tenant._cache_get("k") == entry and tenant._cache_get("other") is None


def test_an_old_entry_a_shared_file_or_a_symlink_is_a_miss(cache_home: Path, tmp_path: Path) -> None:
    entry = {"stamp": "s", "assoc": "a", "qos": "q"}
    tenant._cache_put("k", entry)
    data = json.loads(cache_home.read_text())
    data["k"]["at"] = time.time() - tenant.TTL - 1
    cache_home.write_text(json.dumps(data))
    assert tenant._cache_get("k") is None
    tenant._cache_put("k", entry)
    os.chmod(cache_home, 0o666)  # another user could have written it
    assert tenant._cache_get("k") is None
    real = tmp_path / "elsewhere.json"
    os.replace(cache_home, real)
    os.chmod(real, 0o600)
    cache_home.symlink_to(real)
    assert tenant._cache_get("k") is None
    cache_home.unlink()
    cache_home.write_text("not json")
    os.chmod(cache_home, 0o600)
    assert tenant._cache_get("k") is None


def test_every_cache_level_is_0700_whichever_cache_makes_it_first(tmp_path: Path) -> None:
    """gpusub's caches (inventory, interpreter, facts, queries, templates, tenant) share $XDG_CACHE_HOME/slurmkit;
    makedirs(mode=) gave the parents the umask's 0755, so the tenant cache's dir was 0755 whenever another cache
    made slurmkit/ first (seen on a CI lab pass: the live dry run's caches run side by side)."""
    from slurmkit.safefs import makedirs_private

    old = os.umask(0o022)
    try:
        makedirs_private(tmp_path / "home" / ".cache" / "slurmkit" / "inventory")
        makedirs_private(tmp_path / "home" / ".cache" / "slurmkit")  # exists: no error, unchanged
    finally:
        os.umask(old)
    for d in ("home", "home/.cache", "home/.cache/slurmkit", "home/.cache/slurmkit/inventory"):
        assert stat.S_IMODE((tmp_path / d).stat().st_mode) == 0o700, d
    (tmp_path / "mine").mkdir(mode=0o755)
    makedirs_private(tmp_path / "mine")  # a directory the user made is theirs: left as it is
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o755
