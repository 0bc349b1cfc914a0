"""Pure index math: which samples form each global batch, and which slice each replica takes.

The policy, in one place:

* The order of an epoch is a keyed permutation of ``[0, N)`` that depends only on
  ``(seed, epoch)``. It is our own Fisher-Yates over a splitmix64 counter hash, so it does not
  change between numpy or numba versions.
* Global batch ``k`` is ``order[k*G:(k+1)*G]`` with ``G = micro_batch * grad_accum *
  total_replicas``. Nothing here depends on how the replicas are split across instances.
* Inside a global batch the layout is replica-major: global replica ``r`` takes the contiguous
  slice ``[r*A*M, (r+1)*A*M)``, read as ``[A, M]`` (accumulation step, then micro-batch row).
  Instance ``i`` owns replicas ``[i*R_local, (i+1)*R_local)``, so its share is one contiguous
  slice too, and concatenating every replica's slice in global replica order gives back the
  global batch.
* Remainder (``N % G`` samples): ``drop_remainder=True`` drops them (a different subset each
  epoch, since the order changes). ``drop_remainder=False`` pads the last global batch with the
  first samples of the epoch's order and marks the padding ``mask=False``, so every sample counts
  exactly once among the masked-in rows.
"""

from __future__ import annotations

import numpy as np

from jit import jit
from jit.hashing import hash3, splitmix64

_S11 = np.uint64(11)


@jit
def uniform(key: np.uint64, counter: int) -> float:
    """A float in [0, 1) drawn from ``key`` and a counter (53 random bits)."""
    bits = splitmix64(key ^ splitmix64(np.uint64(counter)))
    return float(bits >> _S11) * (1.0 / 9007199254740992.0)


@jit
def _keyed_permutation(n: int, key: np.uint64) -> np.ndarray:
    perm = np.arange(n)
    for i in range(n - 1, 0, -1):
        bits = splitmix64(key ^ splitmix64(np.uint64(i)))
        j = np.int64(bits % np.uint64(i + 1))
        tmp = perm[i]
        perm[i] = perm[j]
        perm[j] = tmp
    return perm


def _check_non_negative(**values: int) -> None:
    for name, value in values.items():
        if int(value) < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def epoch_order(num_samples: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of ``[0, num_samples)`` used in ``epoch``; a pure function of its arguments."""
    _check_non_negative(num_samples=num_samples, seed=seed, epoch=epoch)
    key = np.uint64(hash3(int(seed), int(epoch), 0x5EED))
    return _keyed_permutation(int(num_samples), key)


def steps_per_epoch(num_samples: int, global_batch: int, drop_remainder: bool) -> int:
    """Global batches in one epoch: ``N // G`` when dropping the remainder, else ``ceil(N / G)``."""
    if global_batch <= 0:
        raise ValueError(f"global batch must be positive, got {global_batch}")
    _check_non_negative(num_samples=num_samples)
    if drop_remainder:
        return num_samples // global_batch
    return -(-num_samples // global_batch)


def global_batch_rows(
    order: np.ndarray, global_batch: int, step: int, drop_remainder: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Sample ids and mask of global batch ``step`` of an epoch whose order is ``order``.

    Returns ``(rows int64 [G], mask bool [G])``. Padding rows (only with
    ``drop_remainder=False``, only in the last batch) repeat the start of the order, cycling if
    the epoch is shorter than one batch, and have ``mask=False``.
    """
    n = len(order)
    steps = steps_per_epoch(n, global_batch, drop_remainder)
    if not 0 <= step < steps:
        raise ValueError(f"step {step} is outside the epoch's {steps} global batches")
    positions = np.arange(step * global_batch, (step + 1) * global_batch, dtype=np.int64)
    mask = positions < n
    rows = np.asarray(order, dtype=np.int64)[positions % n]
    return rows, mask


def replica_slice(replica: int, grad_accum: int, micro_batch: int) -> slice:
    """The slice of a global batch that global replica ``replica`` takes (``A*M`` rows)."""
    _check_non_negative(replica=replica)
    per_replica = grad_accum * micro_batch
    return slice(replica * per_replica, (replica + 1) * per_replica)


def shard_for(
    instance_index: int, num_instances: int, local_replicas: int, grad_accum: int, micro_batch: int
) -> slice:
    """The contiguous slice of every global batch that instance ``instance_index`` reads.

    The instance owns global replicas ``[instance_index*local_replicas, ...)``, the same
    offset as ``POPDIST_REPLICA_INDEX_OFFSET``.
    """
    if not 0 <= instance_index < num_instances:
        raise ValueError(f"instance index {instance_index} is outside [0, {num_instances})")
    first = replica_slice(instance_index * local_replicas, grad_accum, micro_batch)
    return slice(first.start, first.start + local_replicas * grad_accum * micro_batch)
