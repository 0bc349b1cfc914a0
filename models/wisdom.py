"""``python -m models.wisdom [--forget]``: this machine's kernel wisdom (``models.kernels.wisdom``),
the formulation each product shape goes through as measured here, or dropped so that the next run
measures again."""

from __future__ import annotations

import argparse
import sys

import jit as _jit
from models.kernels import wisdom


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m models.wisdom",
                                     description="This machine's kernel wisdom: the formulation each product "
                                                 "shape goes through, as measured here (POPRUN_WISDOM).")
    parser.add_argument("--forget", action="store_true",
                        help="drop this machine's choices, so that the next run measures again")
    args = parser.parse_args(argv)
    path = _jit.wisdom_path()
    if path is None:
        print(f"{_jit.WISDOM_VARIABLE}=off: the fixed shape rules decide; nothing is recorded")
        return 0
    if args.forget:
        print(f"{path}: dropped {wisdom.drop()} choices of {wisdom.machine()}")
        return 0
    entries = wisdom.recorded()
    print(f"{path}\n{wisdom.machine()}: {len(entries)} choices")
    for key, entry in sorted(entries.items()):
        times = ", ".join(f"{name} {ms:.3f} ms" for name, ms in entry["ms"].items())
        print(f"  {key:64} {entry['choice']:10} ({times})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
