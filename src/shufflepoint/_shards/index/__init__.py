"""The corpus index: rows per shard (and sizes, versions, checksums) built once, kept as a columnar sidecar,
published for every node, and checked against the storage (``integrity``).

Words: docs/glossary.md (corpus index, sidecar).
"""
