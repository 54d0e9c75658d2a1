"""The version of tm2nn, in one place: the package, its metadata (pyproject.toml reads it)
and the models it writes (``tm2nn.version``) take it from here."""

__version__ = "0.1.0"
