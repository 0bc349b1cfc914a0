"""Tests of the launcher; ``launcher_helpers`` runs it, ``fake_ssh.py`` stands in for ssh between emulated hosts."""
