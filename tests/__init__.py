"""The test suite, a package so that its shared helpers import as ``tests.<folder>.<module>``
(pytest puts the repository root on ``sys.path`` for it); test modules never import each other."""
