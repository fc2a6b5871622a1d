"""Where bytes come from: local paths or any fsspec URL (``storage``), retries and faults, the per-node cache,
reads by byte range and their read-ahead, whole-shard prefetch, decoded token ids kept on disk.

Words: docs/glossary.md (byte range, node cache, ranged read, read-ahead, prefetch, kept ids).
"""
