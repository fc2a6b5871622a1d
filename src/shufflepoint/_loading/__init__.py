"""The loader: its position model (``position.py``) and the torch adapters that drive it, ``loader.py``
(``DataLoader``) and ``sampler.py`` (``ResumableSampler``). Imports ``_core``, ``_order``, ``_shards``.
docs/development.md, "The tree".

A regular package, as every room of ``src/shufflepoint/`` is, so that tools which read the tree without
importing it (griffe, for the documentation site's API reference) find its modules.
"""
