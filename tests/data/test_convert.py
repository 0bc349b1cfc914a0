import gzip
import subprocess
import sys

import numpy as np
import pytest

from data.__main__ import main
from data.convert import FASHION_MNIST_CLASSES, balanced_subset, convert_idx, convert_images, convert_synthetic
from data.dataset import open_dataset, verify_dataset
from data.idx import read_idx
from data.sources import SHIPPED_SUBSET, fashion_mnist_path
from data.synthetic import SyntheticSpec, synthetic_block


def write_idx(path, array, compress=False):
    """An IDX file (big-endian header, then the bytes), plain or gzip: the fixtures' writer."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    payload = bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes() + array.tobytes()
    path.write_bytes(gzip.compress(payload) if compress else payload)


def _fake_mnist(folder, n_train=30, n_val=20, compress=True):
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_val)):
        write_idx(folder / f"{prefix}-images-idx3-ubyte{'.gz' if compress else ''}",
                  rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), compress)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{'.gz' if compress else ''}", np.arange(n) % 10, compress)
    return folder


@pytest.mark.parametrize("compress", [True, False])
def test_idx_round_trip(tmp_path, compress):
    array = np.arange(60, dtype=np.uint8).reshape(3, 4, 5)
    write_idx(tmp_path / "a.idx", array, compress)
    assert np.array_equal(read_idx(tmp_path / "a.idx"), array)


def test_idx_errors(tmp_path):
    write_idx(tmp_path / "a.idx", np.zeros((3, 4), np.uint8))
    (tmp_path / "cut.idx").write_bytes((tmp_path / "a.idx").read_bytes()[:-2])
    with pytest.raises(ValueError, match="truncated or corrupted"):
        read_idx(tmp_path / "cut.idx")
    (tmp_path / "junk.idx").write_bytes(b"hello world")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "junk.idx")
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "none.idx")


def test_balanced_subset_takes_the_first_of_each_class():
    labels = np.array([0, 1, 0, 1, 0, 2, 2, 1, 2])
    assert balanced_subset(labels, 6, 3).tolist() == [0, 1, 2, 3, 5, 6]
    assert balanced_subset(labels, None, 3).tolist() == list(range(9))


def test_convert_idx_with_limits(tmp_path):
    out = convert_idx(_fake_mnist(tmp_path / "mnist"), tmp_path / "m.h5", class_names=FASHION_MNIST_CLASSES,
                      source="s", licence="MIT", train_limit=20, val_limit=10, compression="gzip")
    train = open_dataset(out, "train")
    assert train.info.image_shape == (28, 28, 1) and train.info.num_samples == 20 and train.info.compressed
    assert np.bincount(train.labels).tolist() == [2] * 10
    assert open_dataset(out, "validation").info.num_samples == 10


def test_synthetic_is_deterministic_balanced_and_learnable():
    spec = SyntheticSpec(num_samples=400, height=12, width=10, channels=2, num_classes=4, seed=3)
    images, labels = synthetic_block(spec, 0, 400)
    again, _ = synthetic_block(spec, 0, 400)
    assert images.shape == (400, 12, 10, 2) and np.array_equal(images, again)
    assert np.bincount(labels).tolist() == [100] * 4
    test_images, test_labels = synthetic_block(spec, 400, 600, split_seed=1)
    flat = images.reshape(400, -1).astype(np.float64)
    centroids = np.stack([flat[labels == k].mean(axis=0) for k in range(4)])
    distances = ((test_images.reshape(200, -1)[:, None, :] - centroids[None]) ** 2).sum(-1)
    assert (distances.argmin(axis=1) == test_labels).mean() > 0.8  # nearest-centroid, chance is 0.25


def test_convert_synthetic(tmp_path):
    spec = SyntheticSpec(num_samples=50, height=9, width=7, channels=3, num_classes=5)
    class Bar:
        total, updates = None, []

        def update(self, n):
            self.updates.append(n)

    bar = Bar()
    out = convert_synthetic(tmp_path / "s.h5", train=spec, val_samples=12, chunk_rows=16, progress=bar)
    assert bar.total == 62 and bar.updates == [16, 16, 16, 2, 12]
    assert [i.num_samples for i in verify_dataset(out)] == [50, 12]


def test_convert_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for k, name in enumerate(("cat", "dog")):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(5):
            pixels = rng.integers(0, 256, (20 + i, 30, 3), dtype=np.uint8)
            pixels[..., k] = 255
            suffix = ".png" if i % 2 else ".jpg"
            Image.fromarray(pixels).save(tmp_path / "imgs" / name / f"{i}{suffix}")
    (tmp_path / "imgs" / "dog" / "notes.txt").write_text("not an image")
    out = convert_images(tmp_path / "imgs", tmp_path / "i.h5", size=16, val_fraction=0.2, workers=2)
    train, val = open_dataset(out, "train"), open_dataset(out, "validation")
    assert train.info.class_names == ("cat", "dog") and train.info.image_shape == (16, 16, 3)
    assert (train.info.num_samples, val.info.num_samples) == (8, 2)
    images = train.read_all()
    channel_means = np.stack([images[train.labels == k].mean(axis=(0, 1, 2)) for k in (0, 1)])
    assert channel_means[0, 0] > channel_means[0, 1] + 60 and channel_means[1, 1] > channel_means[1, 0] + 60


def test_convert_image_folder_reports_a_bad_image(tmp_path):
    (tmp_path / "imgs" / "a").mkdir(parents=True)
    for name in ("broken.jpg", "other.png"):
        (tmp_path / "imgs" / "a" / name).write_bytes(b"not an image")
    with pytest.raises(ValueError, match="broken.jpg: cannot decode image"):
        convert_images(tmp_path / "imgs", tmp_path / "i.h5", size=8, val_fraction=0.5, workers=1)
    assert not (tmp_path / "i.h5").exists()


def test_convert_image_folder_refuses_an_empty_class_folder(tmp_path, capsys):
    from PIL import Image

    for name in ("cat", "dog"):
        (tmp_path / "imgs" / name).mkdir(parents=True)
    for i in range(4):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(tmp_path / "imgs" / "cat" / f"{i}.png")
    args = ["convert", "images", str(tmp_path / "imgs"), str(tmp_path / "i.h5"), "--size", "8", "--val-fraction", "0.5",
            "--workers", "1"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"class folder(s) without .jpg/.jpeg/.png files: {tmp_path / 'imgs' / 'dog'};" in err
    assert "add images to them or remove them" in err and "cat" not in err.split("files:")[1]
    assert not (tmp_path / "i.h5").exists()
    (tmp_path / "imgs" / "dog").rmdir()
    assert main(args) == 0 and open_dataset(tmp_path / "i.h5", "train").info.class_names == ("cat",)


def test_cli_info_finds_the_shipped_subset_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["info", "data/fashion-mnist-subset.h5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(str(SHIPPED_SUBSET)) and "train: 10000 x (28, 28, 1)" in out
    assert main(["info", "data/absent.h5"]) == 1
    assert "data/absent.h5: file not found" in capsys.readouterr().err


def test_cli_convert_info_check_and_errors(tmp_path, capsys):
    out = tmp_path / "cli.h5"
    assert main(["convert", "synthetic", str(out), "--train", "20", "--val", "5", "--height", "4",
                 "--width", "4", "--channels", "1", "--classes", "2", "--no-checksum"]) == 0
    assert main(["check", str(out)]) == 0
    assert not open_dataset(out, "train").info.checksummed
    assert "every chunk read and checksummed: OK" in capsys.readouterr().out
    assert main(["convert", "idx", str(_fake_mnist(tmp_path / "m", compress=False)), str(tmp_path / "m.h5"),
                 "--train-limit", "10"]) == 0
    assert main(["info", str(tmp_path / "m.h5")]) == 0
    assert "train: 10 x (28, 28, 1)" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "missing.h5")]) == 1
    assert "missing.h5: file not found" in capsys.readouterr().err


def test_fashion_mnist_path_prefers_an_installed_full_set(tmp_path):
    assert fashion_mnist_path(idx_dir=tmp_path / "absent") == SHIPPED_SUBSET
    folder = _fake_mnist(tmp_path / "fm")
    path = fashion_mnist_path(idx_dir=folder, cache_dir=tmp_path / "cache")
    assert path == tmp_path / "cache" / "fashion-mnist-full.h5"
    assert open_dataset(path, "train").info.num_samples == 30
    assert fashion_mnist_path(full=False, idx_dir=folder) == SHIPPED_SUBSET


def test_shipped_subset_is_valid_balanced_and_attributed():
    train, val = open_dataset(SHIPPED_SUBSET, "train"), open_dataset(SHIPPED_SUBSET, "validation")
    assert (train.info.num_samples, val.info.num_samples) == (10000, 2000)
    assert train.info.image_shape == (28, 28, 1) and train.info.class_names == FASHION_MNIST_CLASSES
    assert np.bincount(train.labels).tolist() == [1000] * 10 and np.bincount(val.labels).tolist() == [200] * 10
    assert "Zalando" in train.info.source and "MIT" in train.info.licence and "Zalando SE" in train.info.licence
    assert 60 < train.info.mean[0] < 90  # Fashion-MNIST's pixel mean is about 73
    assert SHIPPED_SUBSET.stat().st_size < 8 * 2**20


def test_runtime_modules_import_only_numpy_numba_h5py():
    code = ("import sys; import data.loader, data.sources, data.dataset; "
            "print(sorted(m for m in ('torch', 'mpi4py', 'tqdm', 'PIL', 'models', 'ipu', 'poprun_py') "
            "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_shipped_subset_labels_match_the_images():
    train, val = open_dataset(SHIPPED_SUBSET, "train"), open_dataset(SHIPPED_SUBSET, "validation")
    x = train.read_all().reshape(10000, -1).astype(np.float32)
    centroids = np.stack([x[train.labels == k].mean(axis=0) for k in range(10)])
    v = val.read_all().reshape(2000, -1).astype(np.float32)
    scores = v @ centroids.T - 0.5 * (centroids**2).sum(axis=1)
    accuracy = (scores.argmax(axis=1) == val.labels).mean()
    assert accuracy > 0.6  # nearest centroid on Fashion-MNIST reaches about 0.68; shuffled labels give 0.1


def test_convert_idx_names_classes_from_a_flag_or_by_index_never_silently(tmp_path, capsys):
    source = str(_fake_mnist(tmp_path / "m", compress=False))
    assert main(["convert", "idx", source, str(tmp_path / "plain.h5")]) == 0
    assert open_dataset(tmp_path / "plain.h5", "train").info.class_names == tuple(str(k) for k in range(10))
    names = ",".join(f"c{k}" for k in range(10))
    assert main(["convert", "idx", source, str(tmp_path / "named.h5"), "--class-names", names]) == 0
    assert open_dataset(tmp_path / "named.h5", "train").info.class_names[:2] == ("c0", "c1")
    assert main(["convert", "idx", source, str(tmp_path / "fm.h5"), "--preset", "fashion-mnist"]) == 0
    assert open_dataset(tmp_path / "fm.h5", "train").info.class_names == FASHION_MNIST_CLASSES


def test_ctrl_c_during_convert_prints_no_traceback_and_leaves_no_file(tmp_path, monkeypatch, capsys):
    import data.__main__ as cli

    def interrupted(args, progress):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_run_convert", interrupted)
    out = tmp_path / "x.h5"
    assert main(["convert", "synthetic", str(out), "--train", "4", "--val", "2"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err and not out.exists()
