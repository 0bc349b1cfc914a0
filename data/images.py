"""Decoding a folder of class sub-folders of JPEG/PNG images (ImageNet style) to uint8 arrays.

Pillow is imported only here, and only when a folder is converted: the loader never needs it.
Each image is converted to RGB, resized so that its shorter side is ``size`` (bilinear), then
centre-cropped to ``size x size``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

EXTENSIONS = (".jpg", ".jpeg", ".png")

logger = logging.getLogger(__name__)


def list_classes(root: str | os.PathLike) -> list[str]:
    """Sorted names of the class sub-folders of ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory of class sub-folders")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise ValueError(f"{root}: has no class sub-folders (expected {root}/<class>/<image>.jpg)")
    return classes


def list_images(root: str | os.PathLike, classes: list[str], *, every_class: bool = True) -> tuple[list[Path], np.ndarray]:
    """Every image file under ``root/<class>/`` in a fixed order, with its class index.

    A class with no images is an error when ``every_class`` (the training folder: the model would
    have a class it never sees), otherwise a warning (a validation folder).
    """
    files, labels, empty = [], [], []
    for index, name in enumerate(classes):
        folder = Path(root) / name
        found = sorted(p for p in folder.iterdir() if p.suffix.lower() in EXTENSIONS) if folder.is_dir() else []
        files += found
        labels += [index] * len(found)
        if not found:
            empty.append(str(folder))
    if not files:
        raise ValueError(f"{root}: no {'/'.join(EXTENSIONS)} files in the class sub-folders")
    if empty:
        what = f"{len(empty)} class folder(s) without {'/'.join(EXTENSIONS)} files: {', '.join(empty)}"
        if every_class:
            raise ValueError(f"{what}; add images to them or remove them (each sub-folder is a class)")
        logger.warning("%s: those classes have no images in this split", what)
    return files, np.asarray(labels, dtype=np.int64)


def load_image(path: Path, size: int) -> np.ndarray:
    """One image as uint8 [size, size, 3]: shorter side resized to ``size``, then centre-cropped."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image = image.convert("RGB")
            width, height = image.size
            scale = size / min(width, height)
            new_w, new_h = max(size, round(width * scale)), max(size, round(height * scale))
            image = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
            left, top = (new_w - size) // 2, (new_h - size) // 2
            return np.asarray(image.crop((left, top, left + size, top + size)), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as err:
        raise ValueError(f"{path}: cannot decode image ({err})") from err
