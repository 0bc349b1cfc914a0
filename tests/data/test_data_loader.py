import threading

import numpy as np
import pytest

from data.augment import AugmentConfig
from data.dataset import open_dataset
from data.layout import DatasetError
from data.loader import Batch, BatchSpec, Loader, evaluation_loader, host_batches_ahead
from tests.data.tiny_h5 import row_ids, write_tiny


@pytest.fixture
def train(tiny_file):
    dataset = open_dataset(tiny_file, "train")
    yield dataset
    dataset.close()


def _epoch(loader):
    return list(loader)


def test_batch_shapes_dtypes_and_labels(train):
    spec = BatchSpec(micro_batch=3, grad_accum=2, local_replicas=2)
    batches = _epoch(Loader(train, spec, seed=1))
    assert len(batches) == 40 // 12 == 3
    b = batches[0]
    assert b.images.shape == (2, 2, 3, 6, 5, 3) and b.images.dtype == np.uint8
    assert b.labels.shape == (2, 2, 3) and b.labels.dtype == np.int64 and b.mask.all()
    assert np.array_equal(row_ids(b.images), b.sample_ids)
    assert np.array_equal(b.labels, b.sample_ids % 4)
    assert [(x.epoch, x.step) for x in batches] == [(0, 0), (0, 1), (0, 2)]


@pytest.mark.parametrize("augment", [False, AugmentConfig(out_size=(4, 4), scale=(0.3, 1.0))])
def test_global_batches_do_not_depend_on_the_instance_split(train, augment):
    def global_batches(instances, local):
        per_instance = []
        for i in range(instances):
            spec = BatchSpec(micro_batch=2, grad_accum=2, local_replicas=local, num_instances=instances,
                             instance_index=i)
            per_instance.append(_epoch(Loader(train, spec, seed=7, augment=augment, prefetch_batches=0)))
        return [np.concatenate([b[s].images for b in per_instance]) for s in range(len(per_instance[0]))], \
               [np.concatenate([b[s].sample_ids for b in per_instance]) for s in range(len(per_instance[0]))]

    ref_images, ref_ids = global_batches(1, 4)
    for instances, local in ((2, 2), (4, 1)):
        images, ids = global_batches(instances, local)
        assert all(np.array_equal(a, b) for a, b in zip(ids, ref_ids))
        assert all(np.array_equal(a, b) for a, b in zip(images, ref_images))


def test_every_sample_once_per_epoch_across_replicas_with_pad_and_mask(train):
    seen = []
    for i in range(3):
        spec = BatchSpec(micro_batch=2, grad_accum=1, local_replicas=2, num_instances=3, instance_index=i)
        for b in Loader(train, spec, seed=3, drop_remainder=False):
            seen += b.sample_ids[b.mask].tolist()
    assert sorted(seen) == list(range(40))


def test_order_is_a_function_of_seed_and_epoch(train):
    spec = BatchSpec(micro_batch=4)
    a, b, c = Loader(train, spec, seed=2), Loader(train, spec, seed=2), Loader(train, spec, seed=3)
    epoch0 = [x.sample_ids for x in a]
    assert all(np.array_equal(x, y.sample_ids) for x, y in zip(epoch0, b))
    assert not all(np.array_equal(x, y.sample_ids) for x, y in zip(epoch0, c))
    assert a.position == (1, 0)
    epoch1 = [x.sample_ids for x in a]
    assert [x.epoch for x in a] == [2] * 10
    assert not all(np.array_equal(x, y) for x, y in zip(epoch0, epoch1))


def test_prefetch_stream_and_memory_give_identical_batches(train):
    spec = BatchSpec(micro_batch=3, local_replicas=2)
    config = AugmentConfig(scale=(0.5, 1.0))
    variants = [Loader(train, spec, seed=4, augment=config, prefetch_batches=p, cache=c)
                for p, c in ((0, "memory"), (3, "memory"), (1, "stream"), (0, "stream"))]
    assert variants[0].cache == "memory" and variants[2].cache == "stream"
    runs = [[b.images for b in v] for v in variants]
    for run in runs[1:]:
        assert len(run) == len(runs[0]) and all(np.array_equal(a, b) for a, b in zip(run, runs[0]))


def test_resume_replays_exactly_the_uninterrupted_batches(train):
    spec = BatchSpec(micro_batch=3, grad_accum=2)
    reference = Loader(train, spec, seed=9, augment=True)
    expected = [b for _ in range(2) for b in reference]
    first = Loader(train, spec, seed=9, augment=True)
    seen = []
    for b in first:
        seen.append(b)
        if b.step == 1:
            break
    state = first.state()
    assert (state["epoch"], state["step"]) == (0, 2)
    resumed = Loader(train, spec, seed=9, augment=True)
    resumed.load_state(state)
    seen += list(resumed) + list(resumed)
    assert [(b.epoch, b.step) for b in seen] == [(b.epoch, b.step) for b in expected]
    assert all(np.array_equal(a.images, b.images) for a, b in zip(seen, expected))


def test_position_and_state_validation(train):
    loader = Loader(train, BatchSpec(micro_batch=4), seed=0)
    loader.set_position(2, 10)
    assert loader.position == (3, 0)
    with pytest.raises(ValueError, match="invalid"):
        loader.set_position(0, 11)
    with pytest.raises(ValueError, match="seed=5 but this loader has 0"):
        loader.load_state({**loader.state(), "seed": 5})


def test_breaking_out_stops_the_producer_thread(train):
    loader = Loader(train, BatchSpec(micro_batch=1), seed=0, prefetch_batches=2)
    iterator = iter(loader)
    next(iterator)
    assert any(t.name == "data-loader" for t in threading.enumerate())
    iterator.close()
    assert not any(t.name == "data-loader" for t in threading.enumerate())
    assert loader.position == (0, 1) and loader.stats.batches == 1


def test_producer_errors_reach_the_training_thread(train, monkeypatch):
    loader = Loader(train, BatchSpec(micro_batch=4), seed=0)
    real = loader.batch_at

    def failing(epoch, step):
        if step == 2:
            raise DatasetError("boom at step 2")
        return real(epoch, step)

    monkeypatch.setattr(loader, "batch_at", failing)
    steps = []
    with pytest.raises(DatasetError, match="boom at step 2"):
        for b in loader:
            steps.append(b.step)
    assert steps == [0, 1]


def test_stream_mode_reads_only_the_instance_share(train, monkeypatch):
    spec = BatchSpec(micro_batch=2, local_replicas=1, num_instances=4, instance_index=2)
    loader = Loader(train, spec, seed=1, cache="stream", prefetch_batches=0)
    read = []
    real = train.read_rows
    monkeypatch.setattr(train, "read_rows", lambda rows, dst: (read.append(np.array(rows)), real(rows, dst)))
    batches = list(loader)
    assert len(read) == len(batches) == 5
    assert all(np.array_equal(r, b.sample_ids.ravel()) for r, b in zip(read, batches))
    assert sum(len(r) for r in read) == 40 // 4


def test_fewer_samples_than_one_global_batch(tmp_path):
    path = write_tiny(tmp_path / "small.h5", n_train=10)
    dataset = open_dataset(path, "train")
    message = r"small.h5: split 'train' has 10 samples, fewer than one global batch of 12"
    with pytest.raises(DatasetError, match=message):
        Loader(dataset, BatchSpec(micro_batch=3, local_replicas=2, num_instances=2))
    padded = Loader(dataset, BatchSpec(micro_batch=3, local_replicas=2, num_instances=2), drop_remainder=False)
    assert padded.steps_per_epoch == 1


def test_evaluation_counts_every_validation_sample_once(tiny_file):
    validation = open_dataset(tiny_file, "validation")
    seen = []
    for i in range(2):
        loader = evaluation_loader(validation, BatchSpec(micro_batch=3, num_instances=2, instance_index=i))
        batches = list(loader)
        assert len(batches) == 2
        seen += [s for b in batches for s in b.sample_ids[b.mask].tolist()]
        first: Batch = batches[0]
        assert np.array_equal(row_ids(first.images), first.sample_ids)  # not augmented
    assert sorted(seen) == list(range(10))


def test_bad_loader_arguments(train):
    with pytest.raises(ValueError, match="micro_batch must be positive"):
        BatchSpec(micro_batch=0)
    with pytest.raises(ValueError, match="instance_index 2"):
        BatchSpec(micro_batch=1, num_instances=2, instance_index=2)
    with pytest.raises(ValueError, match="cache must be one of"):
        Loader(train, BatchSpec(micro_batch=1), cache="disk")


def test_evaluation_resize_keeps_the_whole_image(tiny_file):
    validation = open_dataset(tiny_file, "validation")
    same = evaluation_loader(validation, BatchSpec(micro_batch=5), out_size=(6, 5))
    plain = evaluation_loader(validation, BatchSpec(micro_batch=5))
    assert all(np.array_equal(a.images, b.images) for a, b in zip(same, plain))
    bigger = list(evaluation_loader(validation, BatchSpec(micro_batch=5), out_size=(12, 10)))
    assert bigger[0].images.shape == (1, 1, 5, 12, 10, 3)
    # every stored pixel except (0, 0) equals the row id, so the upsampled image keeps it away from the corner
    assert np.array_equal(bigger[0].images[0, 0, :, 6, 6, 0], bigger[0].sample_ids[0, 0] % 251)


def test_another_process_builds_the_same_batch(tiny_file, tmp_path):
    """Instances are separate processes: nothing in a batch may depend on per-process state."""
    import subprocess
    import sys

    code = (f"import numpy as np; from data import open_dataset, Loader, BatchSpec; "
            f"d = open_dataset({str(tiny_file)!r}, 'train'); "
            f"b = Loader(d, BatchSpec(3, 1, 1, 2, 1), seed=11, augment=True, prefetch_batches=0).batch_at(2, 1); "
            f"np.save({str(tmp_path / 'b.npy')!r}, b.images)")
    subprocess.run([sys.executable, "-c", code], check=True)
    train = open_dataset(tiny_file, "train")
    here = Loader(train, BatchSpec(3, 1, 1, 2, 1), seed=11, augment=True, prefetch_batches=0).batch_at(2, 1)
    assert np.array_equal(np.load(tmp_path / "b.npy"), here.images)


def test_the_loader_keeps_prefetch_micro_batches_ahead_of_each_replica():
    assert [host_batches_ahead(d, 1) for d in (0, 1, 2, 3)] == [0, 1, 2, 3]
    assert [host_batches_ahead(3, a) for a in (2, 3, 4, 256)] == [2, 1, 1, 1]
    with pytest.raises(ValueError, match="prefetch_micro_batches must be >= 0"):
        host_batches_ahead(-1, 1)


def test_the_batch_spec_of_a_placement_is_its_instance_share():
    from types import SimpleNamespace

    second = SimpleNamespace(index=1, num_instances=2, num_local_replicas=2)  # as poprun_py.topology.InstanceInfo
    spec = BatchSpec.of_placement(second, micro_batch=3, grad_accum=2)
    assert spec == BatchSpec(micro_batch=3, grad_accum=2, local_replicas=2, num_instances=2, instance_index=1)


def test_the_compressed_stream_warning_is_said_once_a_job(tmp_path, caplog):
    """Every instance streams the same file, so the warning is marked for instance 0 alone (the entry point's
    logging drops ``said_once`` records on the other instances)."""
    dataset = open_dataset(write_tiny(tmp_path / "z.h5", compression="gzip", checksum=True), "train")
    with caplog.at_level("WARNING", logger="data.loader"):
        Loader(dataset, BatchSpec(micro_batch=2), seed=1, cache="stream", prefetch_batches=0)
    [record] = [r for r in caplog.records if "streaming rows from a compressed" in r.getMessage()]
    assert getattr(record, "said_once", False)
