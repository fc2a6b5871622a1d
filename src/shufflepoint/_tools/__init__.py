"""The ``shufflepoint`` command (``cli.py``): may import every layer, and no layer imports it.
docs/development.md, "The tree".

A regular package, as every room of ``src/shufflepoint/`` is, so that tools which read the tree without
importing it (griffe, for the documentation site's API reference) find its modules.
"""
