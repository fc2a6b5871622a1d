"""Media datasets: video clips (``video.py``) decoded in the loader's workers, exact and elastic like any
map-style dataset. Layer: imports ``_core`` and ``_shards`` (storage, the cache folder), never the loader."""
