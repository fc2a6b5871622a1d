"""The package's version, in one place: ``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``),
``shufflepoint.__version__`` and ``shufflepoint --version`` print it, ``CHANGELOG.md`` names it last."""

__version__ = "0.6.0"
