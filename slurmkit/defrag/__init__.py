"""Defragmentation (issue 26): move the fewest, cheapest checkpointing jobs so that a job blocked by fragmentation
gets a whole leaf. ``plan`` is pure (like placement, over the same topology and node states)."""
