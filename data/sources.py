"""Where the default datasets live: the shipped Fashion-MNIST subset, or the full set if installed.

The project ships ``data/fashion-mnist-subset.h5`` (10,000 train + 2,000 validation images,
class-balanced, 28x28x1 uint8, gzip; MIT licence, Zalando SE; see data/README.md) so that the
default job needs neither a download nor root. Where Debian's ``dataset-fashion-mnist`` package
is installed, :func:`fashion_mnist_path` converts its full 60,000 + 10,000 images once into a
cache directory and uses that instead.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from data.convert import FASHION_MNIST_CLASSES, FASHION_MNIST_LICENCE, FASHION_MNIST_SOURCE, IDX_NAMES, convert_idx

logger = logging.getLogger(__name__)

INSTALL_ROOT = Path(__file__).resolve().parents[1]  # the folder holding data/, launch/, models/, ...
SHIPPED_SUBSET = Path(__file__).with_name("fashion-mnist-subset.h5")
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FULL_NAME = "fashion-mnist-full.h5"


def dataset_path(path: str | os.PathLike) -> str:
    """``path`` as given, or, when it is relative and not in the working directory, the same path in
    the installed distribution (where the shipped ``data/fashion-mnist-subset.h5`` lives), so that
    the named configs, the infeed and ``poprun-data`` find it from any directory."""
    given = Path(path)
    installed = INSTALL_ROOT / given
    return str(installed if not given.is_absolute() and not given.exists() and installed.exists() else given)


def default_cache_dir() -> Path:
    """``$POPRUN_DATA_CACHE``, else ``$XDG_CACHE_HOME/poprun_py``, else ``~/.cache/poprun_py``."""
    if os.environ.get("POPRUN_DATA_CACHE"):
        return Path(os.environ["POPRUN_DATA_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "poprun_py"


def has_idx_files(folder: Path) -> bool:
    """True when ``folder`` holds all four MNIST-format files (gzip or not)."""
    stems = [stem for pair in IDX_NAMES.values() for stem in pair]
    return all((folder / s).is_file() or (folder / (s + ".gz")).is_file() for s in stems)


def fashion_mnist_path(full: bool = True, idx_dir: str | os.PathLike | None = None,
                       cache_dir: str | os.PathLike | None = None, required: bool = False) -> Path:
    """The Fashion-MNIST file to train on.

    With ``full=True`` and the IDX files present in ``idx_dir`` (default
    ``$POPRUN_FASHION_MNIST_DIR`` or ``/usr/share/datasets/fashion-mnist``), returns the full set,
    converting it on first use to ``<cache_dir>/fashion-mnist-full.h5``. Otherwise returns the
    shipped subset, or, with ``required=True``, raises ``DatasetError`` saying how to get the full set.
    """
    folder = Path(idx_dir or os.environ.get("POPRUN_FASHION_MNIST_DIR", DEBIAN_DIR))
    if full and required and not has_idx_files(folder):
        from data.layout import DatasetError

        raise DatasetError(f"the full Fashion-MNIST is not installed: {folder} lacks its four IDX files. Install Debian's "
                           "package (`apt-get install dataset-fashion-mnist`), or set POPRUN_FASHION_MNIST_DIR to a folder "
                           "holding train-images-idx3-ubyte[.gz] and the other three, or ask for the shipped subset "
                           "explicitly (data: fashion-mnist-subset)")
    if not full or not has_idx_files(folder):
        if full:
            logger.info("Fashion-MNIST IDX files not found in %s; using the shipped subset %s.", folder, SHIPPED_SUBSET)
        return SHIPPED_SUBSET
    target = Path(cache_dir or default_cache_dir()) / FULL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        logger.info("Converting the full Fashion-MNIST from %s to %s.", folder, target)
        convert_idx(folder, target, class_names=FASHION_MNIST_CLASSES, source=FASHION_MNIST_SOURCE,
                    licence=FASHION_MNIST_LICENCE)
    return target
