"""Studies: grids of real training runs over batch sizes, optimizers and learning rates
(``poprun-study NAME``, ``python -m launch.study``), defined in ``studies.yml`` beside this file.

``grid`` expands a study into points, ``point`` trains one and writes its result row, ``meta`` keeps
the folder's records, ``trajectory`` and ``surface`` the weight snapshots and loss-surface picture,
``plots`` and ``report`` the tables and pictures; ``cli`` is the command.
"""
