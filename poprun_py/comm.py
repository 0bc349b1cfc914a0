"""The communicator between instances: a small MPI-named interface over numpy arrays.

``MPIComm`` wraps mpi4py (imported only when a job has more than one instance); ``LoopbackComm``
is the one-process version with the same semantics. Every collective reports progress (for
``--hang-timeout``) before it starts and after it ends. ``models/`` and ``data/`` never see MPI:
the training engine gets a ``Communicator``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from poprun_py.progress import MPI_READY, report_now, report_progress

_OPS = ("sum", "mean", "max", "min")


class Communicator(Protocol):
    rank: int
    size: int

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray: ...
    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray: ...
    def allgather(self, array: np.ndarray) -> np.ndarray: ...
    def barrier(self) -> None: ...
    def split(self, ranks: frozenset[int]) -> "Communicator | None": ...
    def abort(self, code: int = 1) -> None: ...


def _check_array(array: np.ndarray, what: str) -> None:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{what} takes a numpy array, got {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{what} needs a C-contiguous array (use np.ascontiguousarray) to work in place")


def _check_op(op: str) -> None:
    if op not in _OPS:
        raise ValueError(f"unknown reduction {op!r}: use one of {', '.join(_OPS)}")


class LoopbackComm:
    """A communicator of one: every collective is the identity (mean of one is itself)."""

    rank = 0
    size = 1

    def __init__(self) -> None:
        self._count = 0

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        _check_array(array, "allreduce")
        _check_op(op)
        self._count += 1
        report_progress(f"allreduce #{self._count} done")
        return array

    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        _check_array(array, "broadcast")
        if root != 0:
            raise ValueError(f"broadcast root {root} does not exist in a communicator of size 1")
        return array

    def allgather(self, array: np.ndarray) -> np.ndarray:
        return np.asarray(array)[None].copy()

    def barrier(self) -> None:
        report_progress("barrier done")

    def split(self, ranks: frozenset[int]) -> "LoopbackComm | None":
        return self if 0 in ranks else None

    def abort(self, code: int = 1) -> None:
        import os

        os._exit(code)


class MPIComm:
    """Collectives over an mpi4py communicator, in place on contiguous numpy buffers."""

    def __init__(self, comm=None) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        if comm is None:  # MPI is initialised now: hand its shared-memory files to the rank's watcher
            from poprun_py.shm import report_segments  # (in-MPI mode), and tell the agent (launcher mode)

            report_segments()
            report_now(MPI_READY)
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._count = 0
        self._ops = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}

    def _collective(self, name: str, nbytes: int) -> str:
        self._count += 1
        label = f"{name} #{self._count} ({nbytes} bytes)"
        report_progress(f"in {label}")
        return label

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """Reduce ``array`` over all instances, in place; ``mean`` divides by the size."""
        _check_array(array, "allreduce")
        _check_op(op)
        label = self._collective("allreduce", array.nbytes)
        self.comm.Allreduce(self._MPI.IN_PLACE, array, op=self._ops[op])
        if op == "mean":
            array /= self.size
        report_progress(f"done {label}")
        return array

    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        """Copy ``array`` from ``root`` into every instance's ``array``, in place."""
        _check_array(array, "broadcast")
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast root {root} is not a rank of this communicator (size {self.size})")
        label = self._collective("broadcast", array.nbytes)
        self.comm.Bcast(array, root=root)
        report_progress(f"done {label}")
        return array

    def allgather(self, array: np.ndarray) -> np.ndarray:
        """Every instance's ``array``, stacked in rank order: shape ``[size, *array.shape]``."""
        array = np.ascontiguousarray(array)
        out = np.empty((self.size, *array.shape), dtype=array.dtype)
        label = self._collective("allgather", array.nbytes)
        self.comm.Allgather(array, out)
        report_progress(f"done {label}")
        return out

    def barrier(self) -> None:
        label = self._collective("barrier", 0)
        self.comm.Barrier()
        report_progress(f"done {label}")

    def split(self, ranks: frozenset[int]) -> "MPIComm | None":
        """A communicator of ``ranks`` (collective: every rank must call it); None outside it."""
        color = 0 if self.rank in ranks else self._MPI.UNDEFINED
        sub = self.comm.Split(color, self.rank)
        return None if sub == self._MPI.COMM_NULL else MPIComm(sub)

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)
