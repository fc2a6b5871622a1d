"""The corpora a user builds, each a map-style dataset with a seekable order: ``Shards`` (files as rows),
``Mixture`` (corpora mixed by weight or schedule) and ``Packed`` (documents packed into rows of tokens).
One sub-room each; an order that only one corpus has lives beside it (``mixture/order.py``, ...)."""
