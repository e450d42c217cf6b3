"""The package version, in one place (pyproject.toml repeats it for packaging)."""

__version__ = "0.1.0"
