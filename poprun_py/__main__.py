from poprun_py.cli import script

script()
