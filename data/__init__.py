"""uint8 HDF5 image datasets and the host side of the emulated IPU I/O.

Imports numpy, numba, h5py and the ``jit`` package only (the converter CLI adds tqdm, and Pillow for image folders).
See docs/data.md for the file layout, the sharding policy and the loader contract.
"""

from data.augment import AugmentConfig
from data.dataset import Dataset, DatasetInfo, open_dataset, verify_dataset
from data.layout import DatasetError
from data.loader import Batch, BatchSpec, Loader, LoaderStats, evaluation_loader
from data.sources import SHIPPED_SUBSET, fashion_mnist_path

__all__ = [
    "AugmentConfig", "Batch", "BatchSpec", "Dataset", "DatasetError", "DatasetInfo", "Loader", "LoaderStats",
    "SHIPPED_SUBSET", "evaluation_loader", "fashion_mnist_path", "open_dataset", "verify_dataset",
]
