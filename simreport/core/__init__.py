"""Core: schemas, canonical JSON and hashing, overrides, errors and file I/O.

Nothing in this package imports from the layers above it.
"""
