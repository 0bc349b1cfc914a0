"""Profile rows keep layer names readable: the shortest unique suffix of whole path parts (ipu.cost.layer_names)."""

from ipu.cost.layer_names import column_width, short_names

TORCHVISION = [f"/features/features.{i}/block/block.{j}/block.{j}.0/Conv" for i in (9, 10) for j in (0, 1, 2)]


def test_imported_paths_keep_the_parts_that_tell_them_apart():
    shown = short_names([*TORCHVISION, "/classifier/classifier.1/Gemm", "stem"])
    assert len(set(shown.values())) == len(shown)  # every row still its own
    assert shown["/classifier/classifier.1/Gemm"] == "…/Gemm"
    assert shown["stem"] == "stem"  # short names stay as they are
    assert shown["/features/features.10/block/block.1/block.1.0/Conv"] == "…/features.10/block/block.1/block.1.0/Conv"
    assert all(not s.startswith("/features/features.") for s in shown.values())  # not the old cut at 34 characters
    assert column_width(list(shown.values()), 34) == len("…/features.10/block/block.1/block.1.0/Conv")


def test_a_name_longer_than_the_widest_column_keeps_its_end():
    tail = "/".join(f"very_long_part_{i}" for i in range(8))
    name, other = f"/a/{tail}", f"/b/{tail}"  # only their first part tells them apart
    assert short_names([name, other], max_width=30)[name] == "…" + name[-29:]
