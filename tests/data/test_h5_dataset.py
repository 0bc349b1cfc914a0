import h5py
import numpy as np
import pytest

from data.dataset import open_dataset, verify_dataset
from data.layout import DatasetError, DatasetWriter

from tests.data.tiny_h5 import row_ids, write_tiny


def test_round_trip_layout_and_attributes(tiny_file):
    dataset = open_dataset(tiny_file, "train")
    info = dataset.info
    assert (info.num_samples, info.image_shape, info.num_classes) == (40, (6, 5, 3), 4)
    assert info.class_names == ("c0", "c1", "c2", "c3") and info.chunk_rows == 8
    assert info.source == "test fixture" and info.licence == "none"
    assert dataset.labels.dtype == np.int64 and dataset.labels.tolist() == [i % 4 for i in range(40)]
    images = dataset.read_all()
    assert row_ids(images).tolist() == list(range(40))
    # train mean/std: every pixel of image i is i (except one pixel of 0); computed over the train split only.
    pixels = images.reshape(-1, 3).astype(np.float64)
    assert np.allclose(info.mean, pixels.mean(axis=0)) and np.allclose(info.std, pixels.std(axis=0))
    with h5py.File(tiny_file) as f:
        assert f["train/images"].chunks == (8, 6, 5, 3) and f["train/images"].fletcher32


@pytest.mark.parametrize("compression, checksum", [("none", True), ("none", False), ("gzip", True)])
def test_read_rows_keeps_request_order(tmp_path, compression, checksum):
    dataset = open_dataset(write_tiny(tmp_path / "r.h5", compression=compression, checksum=checksum), "train")
    assert dataset.info.filtered == (compression == "gzip" or checksum)
    assert (dataset._views is not None) == (not dataset.info.filtered)  # memory-mapped chunk views
    rows = np.array([33, 2, 9, 2, 39, 0, 17, 3, 4, 5, 1])
    out = np.empty((len(rows), 6, 5, 3), np.uint8)
    dataset.read_rows(rows, out)
    assert row_ids(out).tolist() == rows.tolist()


def test_verify_reads_both_splits(tiny_file):
    assert [i.num_samples for i in verify_dataset(tiny_file)] == [40, 10]


def _edit(path, fn):
    with h5py.File(path, "a") as f:
        fn(f)
    return path


def _replace(name, data):
    def fn(f):
        del f[name]
        f[name] = data
    return fn


BAD_FILES = {
    "missing split": (lambda f: f.move("validation", "val"), "no group 'validation'"),
    "misnamed images": (lambda f: f.move("train/images", "train/image"), "no dataset 'train/images'"),
    "missing labels": (lambda f: f.__delitem__("train/labels"), "no dataset 'train/labels'"),
    "float images": (_replace("train/images", np.zeros((40, 6, 5, 3), np.float32)), "dtype float32, expected uint8"),
    "rank 3 images": (_replace("train/images", np.zeros((40, 6, 5), np.uint8)), "rank 3"),
    "label count": (_replace("train/labels", np.zeros(39, np.int64)), r"shape \(39,\), expected \[40\]"),
    "float labels": (_replace("train/labels", np.zeros(40, np.float32)), "expected int64"),
    "label too big": (_replace("train/labels", np.full(40, 4, np.int64)), r"train/labels\[0\] = 4 is outside \[0, 4\)"),
    "negative label": (_replace("train/labels", -np.ones(40, np.int64)), "is outside"),
    "no class count": (lambda f: f.attrs.__delitem__("num_classes"), r"missing root attribute\(s\) \['num_classes'\]"),
    "names mismatch": (lambda f: f.attrs.__setitem__("num_classes", 5), "num_classes=5 but 4 class_names"),
    "zero std": (lambda f: f.attrs.__setitem__("std", np.zeros(3)), "std must be positive"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_is_a_clear_error_naming_the_file(tmp_path, case):
    edit, message = BAD_FILES[case]
    path = _edit(write_tiny(tmp_path / "bad.h5"), edit)
    split = "validation" if case == "missing split" else "train"
    with pytest.raises(DatasetError, match=message) as err:
        open_dataset(path, split)
    assert str(path) in str(err.value)


def test_missing_file_and_not_hdf5(tmp_path):
    with pytest.raises(DatasetError, match="file not found"):
        open_dataset(tmp_path / "nope.h5", "train")
    text = tmp_path / "notes.h5"
    text.write_text("hello")
    with pytest.raises(DatasetError, match="not an HDF5 file"):
        open_dataset(text, "train")
    with pytest.raises(ValueError, match="split must be one of"):
        open_dataset(text, "test")


@pytest.mark.parametrize("checksum", [True, False])
@pytest.mark.parametrize("keep", [0.3, 0.7, 0.95])
def test_truncated_file_is_a_clear_error(tmp_path, keep, checksum):
    path = write_tiny(tmp_path / "t.h5", checksum=checksum)
    raw = path.read_bytes()
    path.write_bytes(raw[: int(len(raw) * keep)])
    with pytest.raises(DatasetError, match="truncated|corrupted|not an HDF5") as err:
        verify_dataset(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_corrupted_image_chunk_fails_its_checksum(tmp_path, compression):
    path = write_tiny(tmp_path / "c.h5", compression=compression)
    with h5py.File(path) as f:
        offset = f["train/images"].id.get_chunk_info(2).byte_offset
    raw = bytearray(path.read_bytes())
    raw[offset + 5] ^= 0xFF
    path.write_bytes(bytes(raw))
    dataset = open_dataset(path, "train")  # labels and metadata are intact
    with pytest.raises(DatasetError, match=r"cannot read train/images rows \[16, 24\)") as err:
        dataset.read_all()
    assert str(path) in str(err.value)


def test_writer_refuses_bad_blocks_and_leaves_no_partial_file(tmp_path):
    out = tmp_path / "w.h5"
    with pytest.raises(ValueError, match="rows not written"):
        with DatasetWriter(out, image_shape=(2, 2, 1), split_sizes={"train": 4, "validation": 1},
                           class_names=["a"], source="s", licence="l") as writer:
            writer.write("train", 0, np.zeros((2, 2, 2, 1), np.uint8), np.zeros(2))
    assert not out.exists() and not list(tmp_path.glob("*.partial"))
    with pytest.raises(ValueError, match="uint8"):
        with DatasetWriter(out, image_shape=(2, 2, 1), split_sizes={"train": 1, "validation": 1},
                           class_names=["a"], source="s", licence="l") as writer:
            writer.write("train", 0, np.zeros((1, 2, 2, 1), np.float32), np.zeros(1))
    assert not out.exists()


def test_chunk_views_refuse_chunks_beyond_the_end_of_file(tmp_path, monkeypatch):
    path = write_tiny(tmp_path / "v.h5", checksum=False)
    monkeypatch.setattr("data.chunkmap.os.path.getsize", lambda _: 100)
    with pytest.raises(DatasetError, match=r"v.h5: train/images: image chunk 0 ends at byte \d+ but the file has 100"):
        open_dataset(path, "train")
