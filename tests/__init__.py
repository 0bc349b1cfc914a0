"""The test suite: a package, so that shared helpers import as ``tests.<folder>.<module>`` (no ``sys.path`` edits)."""
