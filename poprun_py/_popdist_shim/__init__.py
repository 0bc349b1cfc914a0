"""The folder that poprun_py puts on the path of the programs it starts, so that ``import popdist``
works in them (``popdist/__init__.py`` here). It holds nothing else, so it shadows nothing; the
distribution installs no top-level ``popdist``, so a Poplar SDK's own stays untouched.
"""
