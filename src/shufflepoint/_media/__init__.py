"""Media: video clips (``video.py``) and images (``images.py``), decoded in the loader's workers, exact and
elastic like any map-style dataset, their random augmentation drawn from the sample's own generator. Layer:
imports ``_core`` and ``_shards`` (storage, the cache folder), never the loader.

Words: docs/glossary.md (clip).
"""
