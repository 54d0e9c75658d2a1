"""The package version (one place: the package, its model files and the wheel read it)."""

__version__ = "0.1.0"
