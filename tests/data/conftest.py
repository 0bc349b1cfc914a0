"""Fixtures for tests/data: tiny HDF5 files built in tmp_path."""

import pytest

from tests.data.tiny_h5 import write_tiny


@pytest.fixture
def tiny_file(tmp_path):
    return write_tiny(tmp_path / "tiny.h5")
