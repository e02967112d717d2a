"""The package version, kept in core so every layer may read it."""

__version__ = "0.1.0"
