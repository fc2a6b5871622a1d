"""The core: the deals (``deals/``, behind the ``Deal`` and ``Cut`` protocols of ``cut.py``) and their
arithmetic, the state and its fields, fingerprints, schedules, and the capabilities a dataset may offer
(``capabilities.py``). Pure: imports ``_order``, never torch. docs/development.md, "The tree".

A regular package, as every room of ``src/shufflepoint/`` is, so that tools which read the tree without
importing it (griffe, for the documentation site's API reference) find its modules.
"""
