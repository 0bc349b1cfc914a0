"""A study folder's records: where and on what it ran (``meta.json``: data, machine, command, wall
time per session) and its result rows (``results.jsonl``)."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from launch.study.grid import Study

META = "meta.json"
RESULTS = "results.jsonl"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def resolve_data(study: Study) -> str:
    """The dataset file of a study's ``data`` key: ``fashion-mnist`` is the full set of Debian's package
    (converted once into the cache; an error naming how to install it where it is missing, never the subset
    in its place); ``fashion-mnist-subset`` is the shipped subset; anything else is a path. Empty: the base
    configuration's own ``data.path``."""
    from data.sources import SHIPPED_SUBSET, fashion_mnist_path

    if study.data == "fashion-mnist":
        return str(fashion_mnist_path(full=True, required=True))
    if study.data == "fashion-mnist-subset":
        return str(SHIPPED_SUBSET)
    if study.data:
        if not Path(study.data).exists():
            raise ValueError(f"study {study.name!r}: data {study.data!r} does not exist; give a dataset file, "
                             "fashion-mnist or fashion-mnist-subset")
        return study.data
    from launch.train.config_file import load_config

    return load_config(study.base).data.path


def portable(value):
    """``value`` (a result row, recursively) with no absolute path of this machine: paths inside the
    installed distribution become relative to it, paths in the home directory start with ``~``."""
    from data.sources import INSTALL_ROOT

    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str):
        return value.replace(f"{INSTALL_ROOT}{os.sep}", "").replace(f"{Path.home()}{os.sep}", f"~{os.sep}")
    return value


def local_path(path: str) -> str:
    """A dataset path of a row (see :func:`portable`) as a path on this machine."""
    from data.sources import dataset_path

    return dataset_path(os.path.expanduser(path))


def data_description(path: str, validation_fraction: float = 0.0, split_seed: int = 0) -> dict:
    """The dataset's splits as the study trains on them (``data.split``): image counts of each."""
    from data.split import open_split

    counts = {}
    for split in ("train", "validation", "test") if validation_fraction else ("train", "validation"):
        d = open_split(path, split, validation_fraction, split_seed)
        counts[split], info = d.info.num_samples, d.info
        d.close()
    return {"path": path, "train_images": counts["train"], "validation_images": counts["validation"],
            "test_images": counts.get("test", 0), "image_shape": list(info.image_shape), "classes": info.num_classes}


def machine() -> dict:
    """CPU model, cores, BLAS, thread settings and the load average now."""
    import numpy as np

    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]["name"]
    except (AttributeError, KeyError, TypeError):
        blas = "unknown"
    return {"cpu": model, "cores": os.cpu_count(), "blas": blas, "numpy": np.__version__,
            "threads": {k: os.environ.get(k, "") for k in THREAD_VARIABLES}, "load_average": list(os.getloadavg())}


def start_meta(study: Study, out: Path, command: str) -> dict:
    """The study's meta before it trains (kept across resumed sessions: each adds a session entry)."""
    path = out / META
    meta = json.loads(path.read_text()) if path.exists() else {"study": study.name, "sessions": []}
    meta["sessions"].append({"command": command, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                             "machine": machine()})
    out.mkdir(parents=True, exist_ok=True)
    _write(path, meta)
    return meta


def finish_meta(out: Path, meta: dict, started: float) -> None:
    session = meta["sessions"][-1]
    session.update(ended=time.strftime("%Y-%m-%d %H:%M:%S"), wall_s=time.time() - started,
                   load_average_end=list(os.getloadavg()))
    _write(out / META, meta)


def read_meta(out: Path) -> dict:
    path = out / META
    return json.loads(path.read_text()) if path.exists() else {"sessions": []}


def _write(path: Path, meta: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, path)


# -- rows -----------------------------------------------------------------------------------
def read_rows(out: Path) -> list[dict]:
    """The rows of ``out/results.jsonl``, the last row of each point winning (a retried failure)."""
    path = out / RESULTS
    rows: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill
            rows[row["id"]] = row
    return list(rows.values())
