"""Corpora stored as files: the layer between the order (``_order``, ``_core``) and the loader.

Its rooms, each a part of the architecture (``docs/development.md``; words in ``docs/glossary.md``):

- ``corpora/``: the map-style datasets a user builds: ``Shards`` (``corpora/shards``), ``Mixture``
  (``corpora/mixture``) and ``Packed`` (``corpora/packed``), with the orders that are theirs alone.
- ``index/``: what makes files a map-style dataset: rows per shard, built once, kept and published.
- ``counting/``: what a corpus counts of its samples once (token counts, bucket keys), kept and shared.
- ``storage/``: where bytes come from: local paths or fsspec URLs, the node cache, ranged reads, prefetch.
- ``readers/``: one module per file format, (shard, rows) -> samples.

Arrows point down the list's reverse: corpora use the index, counting and storage; readers know no
corpus. No room imports the loader; only ``counting/count_share`` takes a collective (Packed's totals).
"""
