"""Loader benchmarks: uint8 against float32 storage, and prefetch overlap.

    .venv/bin/python bench/bench_loader.py [--samples 4096] [--size 64] [--batch 256] [--repeats 3]
                                           [--only throughput|overlap] [--compute spin sleep] [--quiet-wait 30]

Section 1, throughput. Writes one synthetic split twice into a temporary directory, as uint8 (the
project's layout, without the per-chunk checksum) and as float32 (the same pixels as floats, the
same chunking, no filters), then times the same ``Loader`` code on each (one instance, so each step
delivers one whole global batch; median of ``--repeats`` epochs; images/s and MB/s delivered):

* stream:  each step's rows read from the HDF5 file (page cache warm), no augmentation
* memory:  the split held in RAM, batches gathered with ``np.take``, no augmentation
* augment: memory + random-resized crop to 7/8 of the size + flip (numba)

Section 2, overlap. A loader doing real work (memory + RRC 56 + flip) takes L ms a step; a stand-in
device step takes T ms: ``spin`` is a numba loop that releases the GIL (the emulator's case: the
"device" needs a core too), ``sleep`` a wait on a device that computes elsewhere (a real POD).
Without prefetch a step costs T + L; with the default depth-3 queue it should cost max(T, L).
``fraction`` = max(T, L) / measured.
Each figure in this section is the fastest of ``--repeats`` epochs, applied alike to T, L, serial
and overlapped, because on shared cores the fastest run is the least contaminated one.

The cores are shared with other engineers' jobs. Each row first waits (up to ``--quiet-wait`` s)
for the machine to go quiet, and its ``busy`` column is the share of all CPU that other processes
used while it ran: rows with busy above ~0.1 are contaminated.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.augment import AugmentConfig  # noqa: E402
from data.convert import convert_synthetic  # noqa: E402
from data.dataset import Dataset, DatasetInfo, open_dataset  # noqa: E402
from data.loader import BatchSpec, Loader  # noqa: E402
from data.synthetic import SyntheticSpec  # noqa: E402


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


class ForeignLoad:
    """Measures the share of machine CPU used by other processes while the block runs."""

    def __enter__(self):
        self.busy0, self.total0 = cpu_jiffies()
        self.own0 = sum(os.times()[:2])
        return self

    def __exit__(self, *exc):
        busy1, total1 = cpu_jiffies()
        own = (sum(os.times()[:2]) - self.own0) * os.sysconf("SC_CLK_TCK")
        self.share = max(0.0, (busy1 - self.busy0 - own) / max(1, total1 - self.total0))


def wait_for_quiet(max_seconds: float, threshold: float = 0.15) -> float:
    """Wait (up to ``max_seconds``) until other processes use under ``threshold`` of the CPU for 1 s."""
    deadline = time.monotonic() + max_seconds
    while True:
        with ForeignLoad() as load:
            time.sleep(1.0)
        if load.share < threshold or time.monotonic() > deadline:
            return load.share


def float_copy(src: Path, dst: Path) -> None:
    """The same file with images stored as float32 (same chunk rows), uncompressed."""
    with h5py.File(src) as f_in, h5py.File(dst, "w") as f_out:
        for key, value in f_in.attrs.items():
            f_out.attrs[key] = value
        for split in ("train", "validation"):
            images = f_in[split]["images"]
            out = f_out.create_dataset(f"{split}/images", shape=images.shape, dtype=np.float32,
                                       chunks=(images.chunks[0], *images.shape[1:]))
            for start in range(0, images.shape[0], images.chunks[0]):
                out[start:start + images.chunks[0]] = images[start:start + images.chunks[0]].astype(np.float32)
            f_out[f"{split}/labels"] = f_in[split]["labels"][...]


def open_float(path: Path, like: DatasetInfo) -> Dataset:
    """A Dataset over the float32 copy; ``open_dataset`` would (rightly) refuse its dtype."""
    file = h5py.File(path, "r", rdcc_nbytes=0)
    return Dataset(DatasetInfo(**{**like.__dict__, "path": path}), file, file["train/labels"][...])


def time_epochs(loader: Loader, repeats: int) -> tuple[float, float]:
    """Median seconds per epoch and bytes per epoch."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        nbytes = sum(batch.images.nbytes for batch in loader)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), nbytes


def throughput(args: argparse.Namespace, tmp: Path) -> None:
    """Section 1: the same Loader on uint8 and on float32 storage."""
    u8_path, f32_path, sums_path = tmp / "u8.h5", tmp / "f32.h5", tmp / "u8_fletcher32.h5"
    spec = SyntheticSpec(args.samples, args.size, args.size, 3, 10)
    convert_synthetic(u8_path, train=spec, val_samples=16, chunk_rows=256, checksum=False)
    convert_synthetic(sums_path, train=spec, val_samples=16, chunk_rows=256)
    float_copy(u8_path, f32_path)
    u8, sums = open_dataset(u8_path, "train"), open_dataset(sums_path, "train")
    f32 = open_float(f32_path, u8.info)
    print(f"== loader throughput: {args.samples} images {args.size}x{args.size}x3, batch {args.batch}, "
          f"median of {args.repeats} epochs; files: uint8 {u8_path.stat().st_size / 2**20:.1f} MiB, "
          f"float32 {f32_path.stat().st_size / 2**20:.1f} MiB")
    out = round(args.size * 7 / 8)
    modes = {"stream": dict(cache="stream"), "memory": dict(cache="memory"),
             "augment": dict(cache="memory", augment=AugmentConfig(out_size=(out, out)))}
    print(f"{'pipeline':<9} {'uint8 img/s':>12} {'MB/s':>7} {'float32 img/s':>14} {'MB/s':>7} "
          f"{'u8/f32':>7} {'busy':>5}")
    for name, options in modes.items():
        row = {}
        wait_for_quiet(args.quiet_wait)
        with ForeignLoad() as load:
            for label, dataset in (("u8", u8), ("f32", f32)):
                loader = Loader(dataset, BatchSpec(micro_batch=args.batch), seed=0, prefetch_batches=0, **options)
                time_epochs(loader, 1)  # warm-up: numba compile, page cache
                seconds, nbytes = time_epochs(loader, args.repeats)
                row[label] = (loader.steps_per_epoch * args.batch / seconds, nbytes / seconds / 1e6)
        print(f"{name:<9} {row['u8'][0]:>12,.0f} {row['u8'][1]:>7,.0f} {row['f32'][0]:>14,.0f} "
              f"{row['f32'][1]:>7,.0f} {row['u8'][0] / row['f32'][0]:>6.2f}x {load.share:>5.2f}")
    logging.getLogger("data.loader").setLevel(logging.ERROR)
    loader = Loader(sums, BatchSpec(micro_batch=args.batch), seed=0, prefetch_batches=0, cache="stream")
    seconds, nbytes = time_epochs(loader, 1)
    print(f"(stream from the default layout, fletcher32 per chunk so whole chunks are read: "
          f"{loader.steps_per_epoch * args.batch / seconds:,.0f} img/s, {nbytes / seconds / 1e6:,.0f} MB/s)")
    for dataset in (u8, f32, sums):
        dataset.close()


@numba.njit(nogil=True, cache=True)
def _spin(iterations: int) -> float:
    acc = 0.0
    for i in range(iterations):
        acc = acc * 0.999999 + (i & 7)
    return acc


def stand_in(kind: str, target_ms: float):
    """A stand-in device step of about ``target_ms``, releasing the GIL.

    ``spin``: arithmetic on this host's CPU (the emulator, where the "device" is a numba layer and
    needs a core of its own). ``sleep``: the host thread blocked on a device that computes
    elsewhere, as on a real IPU-POD; it needs no core, so it is immune to other jobs.
    """
    if kind == "sleep":
        return lambda: time.sleep(target_ms / 1e3)
    iterations = calibrate(target_ms)
    return lambda: _spin(iterations)


def calibrate(target_ms: float) -> int:
    """Iterations of ``_spin`` that take about ``target_ms`` (fastest of 5 tries)."""
    _spin(10)
    n = 1_000_000
    best = min(_timed(lambda: _spin(n)) for _ in range(5))
    return max(1, int(n * target_ms / 1e3 / best))


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def overlap(args: argparse.Namespace, tmp: Path) -> None:
    """Section 2: step time with and without prefetch for compute T and loading L.

    Every figure is the fastest of ``--repeats`` epochs (per step), the least contaminated estimate
    on shared cores, and the same rule is applied to T, L, serial and overlapped runs.
    """
    path = tmp / "overlap.h5"
    convert_synthetic(path, train=SyntheticSpec(args.samples, 64, 64, 3, 10), val_samples=16, checksum=False)
    dataset = open_dataset(path, "train")
    spec, augment = BatchSpec(micro_batch=args.overlap_batch), AugmentConfig(out_size=(56, 56))
    make = lambda prefetch: Loader(dataset, spec, seed=0, prefetch_batches=prefetch, cache="memory", augment=augment)  # noqa: E731
    steps = make(0).steps_per_epoch
    best = lambda fn: min(_timed(fn) for _ in range(args.repeats)) / steps * 1e3  # noqa: E731  ms per step
    list(make(0))  # warm-up
    wait_for_quiet(args.quiet_wait)
    load_ms = best(lambda: list(make(0)))
    print(f"== overlap: loading L = {load_ms:.1f} ms/step (batch {args.overlap_batch}, RRC 56 + flip, "
          f"{steps} steps); prefetch depth 3; best of {args.repeats} epochs")
    print(f"{'T':>5} {'T/L':>5} {'T ms':>6} {'L ms':>6} {'serial':>7} {'T+L':>6} {'overlap':>8} {'max':>6} "
          f"{'fraction':>9} {'stall ms':>9} {'busy':>5}")
    for kind, ratio in [(kind, ratio) for kind in args.compute for ratio in args.ratios]:
        compute_step = stand_in(kind, load_ms * ratio)
        wait_for_quiet(args.quiet_wait)
        with ForeignLoad() as load:
            load_ms = best(lambda: list(make(0)))
            compute_ms = best(lambda: [compute_step() for _ in range(steps)])
            serial = best(lambda: [compute_step() for _ in make(0)])
            loaders = [make(3) for _ in range(args.repeats)]
            runs = [_timed(lambda: [compute_step() for _ in loader]) / steps * 1e3 for loader in loaders]
        overlapped = min(runs)
        stall = loaders[runs.index(overlapped)].stats.wait_seconds / steps * 1e3
        ideal = max(compute_ms, load_ms)
        print(f"{kind:>5} {ratio:>5.2f} {compute_ms:>6.1f} {load_ms:>6.1f} {serial:>7.1f} {compute_ms + load_ms:>6.1f} "
              f"{overlapped:>8.1f} {ideal:>6.1f} {ideal / overlapped:>9.2f} {stall:>9.1f} {load.share:>5.2f}")
    dataset.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--overlap-batch", type=int, default=128)
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="T/L values")
    parser.add_argument("--compute", nargs="+", choices=("spin", "sleep"), default=["spin", "sleep"],
                        help="stand-in device step: CPU arithmetic, or a wait on a device elsewhere")
    parser.add_argument("--quiet-wait", type=float, default=30.0,
                        help="seconds to wait for other processes to go quiet before each measurement")
    parser.add_argument("--only", choices=("throughput", "overlap"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        if args.only != "overlap":
            throughput(args, Path(tmp))
        if args.only != "throughput":
            overlap(args, Path(tmp))


if __name__ == "__main__":
    main()
