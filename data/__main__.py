"""``poprun-data``: convert datasets to the HDF5 layout, inspect and verify them.

    poprun-data convert idx DIR OUT.h5 [--preset fashion-mnist|mnist | --class-names a,b,...] [--train-limit N]
    poprun-data convert images DIR OUT.h5 --size 64 [--val-fraction 0.1] [--workers N]
    poprun-data convert synthetic OUT.h5 --train N --val N --height H --width W --channels C --classes K
    poprun-data info FILE.h5              # the layout summary of both splits
    poprun-data check FILE.h5             # read every chunk (checksums), exit 1 on the first problem
    poprun-data fashion-mnist             # print the default dataset path (full set if installed)

A relative FILE that is not in the working directory is looked up in the installed distribution, as
training does, so ``poprun-data info data/fashion-mnist-subset.h5`` works from any directory.
The same as ``python -m data``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from data import convert
from data.dataset import verify_dataset
from data.layout import COMPRESSIONS, DatasetError
from data.sources import dataset_path, fashion_mnist_path
from data.synthetic import SyntheticSpec

PRESETS = {
    "fashion-mnist": (convert.FASHION_MNIST_CLASSES, convert.FASHION_MNIST_SOURCE, convert.FASHION_MNIST_LICENCE),
    "mnist": (tuple(str(d) for d in range(10)), "MNIST (LeCun, Cortes, Burges)", "CC BY-SA 3.0"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="poprun-data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    kinds = commands.add_parser("convert", allow_abbrev=False, help="write a dataset file").add_subparsers(dest="kind", required=True)
    idx = kinds.add_parser("idx", allow_abbrev=False, help="MNIST-format IDX files (train-*, t10k-*; gzip or not)")
    idx.add_argument("source")
    idx.add_argument("out")
    names = idx.add_mutually_exclusive_group()
    names.add_argument("--preset", choices=sorted(PRESETS), help="class names, source and licence of a known set")
    names.add_argument("--class-names", metavar="A,B,...", help="the class names, comma-separated, in label order")
    idx.add_argument("--source-text", default="", help="the 'source' attribute (with --class-names or no names)")
    idx.add_argument("--licence", default="unknown", help="the 'licence' attribute (with --class-names or no names)")
    idx.add_argument("--train-limit", type=int, help="keep a class-balanced subset of this many training images")
    idx.add_argument("--val-limit", type=int, help="same for validation (the t10k files)")
    idx.add_argument("--compression", choices=COMPRESSIONS, default="none")
    idx.add_argument("--chunk-rows", type=int, default=1024)
    images = kinds.add_parser("images", allow_abbrev=False, help="a folder of class sub-folders of JPEG/PNG images")
    images.add_argument("source")
    images.add_argument("out")
    images.add_argument("--size", type=int, required=True, help="resize the shorter side, then centre-crop")
    images.add_argument("--val-fraction", type=float, default=0.1, help="held out when there is no train/ val/")
    images.add_argument("--workers", type=int, help="decoding processes (default: all cores)")
    images.add_argument("--chunk-rows", type=int, default=256)
    images.add_argument("--source-text", default="", help="the 'source' attribute")
    images.add_argument("--licence", default="unknown", help="the 'licence' attribute")
    synthetic = kinds.add_parser("synthetic", allow_abbrev=False, help="class-dependent synthetic images (throughput runs)")
    synthetic.add_argument("out")
    for name, default in (("train", 10000), ("val", 1000), ("height", 64), ("width", 64), ("channels", 3),
                          ("classes", 10), ("seed", 0), ("chunk-rows", 256)):
        synthetic.add_argument(f"--{name}", type=int, default=default)
    synthetic.add_argument("--noise", type=float, default=40.0)
    for name, text in (("info", "print the layout summary"), ("check", "read every chunk and checksum")):
        commands.add_parser(name, allow_abbrev=False, help=text).add_argument("file")
    for sub in (idx, images, synthetic):
        sub.add_argument("--no-checksum", dest="checksum", action="store_false",
                         help="no fletcher32 per chunk: faster row-by-row streaming, corruption undetected")
    full = commands.add_parser("fashion-mnist", allow_abbrev=False, help="print the default Fashion-MNIST file path")
    full.add_argument("--subset", action="store_true", help="always the shipped subset")
    return parser


def _run_convert(args: argparse.Namespace, progress) -> None:
    if args.kind == "idx":
        if args.preset:
            names, source, licence = PRESETS[args.preset]
        else:  # no silent preset: the names given, else the label indices
            names = tuple(n.strip() for n in args.class_names.split(",")) if args.class_names else None
            source, licence = args.source_text, args.licence
        convert.convert_idx(args.source, args.out, class_names=names, source=source, licence=licence,
                            train_limit=args.train_limit, val_limit=args.val_limit,
                            chunk_rows=args.chunk_rows, compression=args.compression, checksum=args.checksum,
                            progress=progress)
    elif args.kind == "images":
        convert.convert_images(args.source, args.out, size=args.size, val_fraction=args.val_fraction,
                               workers=args.workers, chunk_rows=args.chunk_rows, source=args.source_text,
                               licence=args.licence, checksum=args.checksum, progress=progress)
    else:
        spec = SyntheticSpec(args.train, args.height, args.width, args.channels, args.classes, args.seed, args.noise)
        convert.convert_synthetic(args.out, train=spec, val_samples=args.val, chunk_rows=args.chunk_rows,
                                  checksum=args.checksum, progress=progress)


def _print_info(path: str, read_everything: bool) -> None:
    from data.dataset import open_dataset

    infos = verify_dataset(path) if read_everything else []
    if not read_everything:
        for split in ("train", "validation"):
            dataset = open_dataset(path, split)
            infos.append(dataset.info)
            dataset.close()
    first = infos[0]
    print(f"{path}\n  classes ({first.num_classes}): {', '.join(first.class_names)}")
    print(f"  mean {first.mean}  std {first.std}\n  source: {first.source}\n  licence: {first.licence}")
    for info in infos:
        print(f"  {info.split}: {info.num_samples} x {info.image_shape} uint8, chunk {info.chunk_rows} rows, "
              f"{'gzip' if info.compressed else 'uncompressed'}, {'fletcher32' if info.checksummed else 'no checksum'}")
    if read_everything:
        print("  every chunk read and checksummed: OK")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "convert":
            from tqdm import tqdm

            with tqdm(unit="img", desc=f"convert {args.kind}") as bar:
                _run_convert(args, bar)
            print(args.out)
        elif args.command in ("info", "check"):
            _print_info(dataset_path(args.file), args.command == "check")
        else:
            print(fashion_mnist_path(full=not args.subset))
    except (DatasetError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the writer already removed its partial file
        print(f"\ninterrupted: {getattr(args, 'out', 'nothing')} was not written", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
