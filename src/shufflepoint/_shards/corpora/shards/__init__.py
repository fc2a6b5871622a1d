"""``Shards``: a corpus of shard files as a map-style dataset; its batch reads, ``locate`` and ``repr``."""
