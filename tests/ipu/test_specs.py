import pytest

from ipu.specs import BOW, KIB, MK1_GC2, MK2_GC200, PODS, get_chip, get_pod
from poprun_py.systems import SYSTEMS


def test_mk2_rates_reproduce_the_datasheet():
    assert MK2_GC200.peak_flops(half=True) == pytest.approx(250e12, rel=0.005)  # 250 TFLOPS FP16
    assert MK2_GC200.peak_flops(half=False) == pytest.approx(62.4e12, rel=0.01)  # 3.994 PF / 64
    assert MK2_GC200.memory_bytes == 1472 * 624 * KIB  # 897 MiB ~ "900 MB"


def test_mk1_and_bow_rates():
    assert MK1_GC2.peak_flops(half=True) == pytest.approx(124.5e12, rel=0.005)
    assert MK1_GC2.peak_flops(half=False) == pytest.approx(31.1e12, rel=0.005)
    assert MK1_GC2.memory_bytes == 304 * 2**20
    assert 4 * BOW.peak_flops(half=True) == pytest.approx(1.4e15, rel=0.01)  # Bow-2000 1.4 PF
    assert BOW.memory_bytes == MK2_GC200.memory_bytes


def test_pods_are_built_on_the_launcher_table():
    assert set(PODS) == set(SYSTEMS)
    for name, pod in PODS.items():
        assert pod.shape is SYSTEMS[name]
        assert pod.num_machines == SYSTEMS[name].machines
    assert PODS["POD128"].ipus_per_ild == 64
    assert get_pod("pod256", "bow").chip is BOW


def test_host_bandwidth_validates_hosts():
    pod = PODS["POD64"]
    assert pod.host_bytes_per_s(4) == 4 * pod.machine.host_nic_bytes_per_s
    with pytest.raises(ValueError, match="POD64 takes 1 to 4 hosts, not 5"):
        pod.host_bytes_per_s(5)


def test_unknown_chip_names_the_choices():
    with pytest.raises(ValueError, match="mk1, mk2, bow"):
        get_chip("mk3")
