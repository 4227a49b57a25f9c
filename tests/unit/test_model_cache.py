"""The per-user parsed-inventory cache: a hit equals a fresh parse; an edit, a bad file or a shared entry is never served."""

import os

import pytest
import yaml

from slurmkit.errors import InventoryError
from slurmkit.lab.inventory import lab_inventory
from slurmkit.model import load_cluster
from slurmkit.model.cache import cache_dir, load_cluster_cached


@pytest.fixture()
def inv(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    p = tmp_path / "site.yaml"
    p.write_text(yaml.safe_dump(lab_inventory()))
    return p


def test_hit_equals_a_fresh_parse_and_is_private(inv):
    first = load_cluster_cached(inv)
    entries = list(cache_dir().glob("*.pickle"))
    assert len(entries) == 1 and (entries[0].stat().st_mode & 0o777) == 0o600
    assert (cache_dir().stat().st_mode & 0o777) == 0o700
    again = load_cluster_cached(inv)
    assert again == first == load_cluster(inv) and again.source_sha256 == first.source_sha256


def test_an_edit_is_parsed_again(inv):
    load_cluster_cached(inv)
    d = lab_inventory()
    d["node_groups"][0]["weight"] = 77
    inv.write_text(yaml.safe_dump(d))
    assert load_cluster_cached(inv).node_groups[0].weight == 77
    assert len(list(cache_dir().glob("*.pickle"))) == 2


def test_a_bad_inventory_raises_every_time_and_is_not_cached(inv):
    inv.write_text(inv.read_text().replace("cores_per_socket", "core_per_socket"))
    for _ in range(2):
        with pytest.raises(InventoryError, match="did you mean 'cores_per_socket'"):
            load_cluster_cached(inv)
    assert not cache_dir().exists() or not list(cache_dir().glob("*.pickle"))


def test_a_group_writable_entry_is_ignored(inv):
    load_cluster_cached(inv)
    (entry,) = cache_dir().glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    os.chmod(entry, 0o666)
    assert load_cluster_cached(inv) == load_cluster(inv)  # parsed again, the foreign-writable file not trusted
