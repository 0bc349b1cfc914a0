"""Shapes of the IPU-POD systems that the launcher validates a job against.

These are the system-level facts the launcher needs (how many IPUs, hosts and IPU-Link
domains a POD has). Chip-level facts (tiles, memory, rates) live in ``ipu/specs.py``, which
builds on this table. Sources: ``docs/sources.md`` §4.
"""

from __future__ import annotations

from dataclasses import dataclass

from poprun_py.errors import ConfigError


@dataclass(frozen=True)
class SystemShape:
    """An IPU-POD as the launcher sees it."""

    name: str
    num_ipus: int
    max_hosts: int
    num_ilds: int  # IPU-Link domains; one POD64 rack is one domain
    machines: int  # IPU-M2000 / Bow-2000 boxes, 4 IPUs each


SYSTEMS: dict[str, SystemShape] = {
    s.name: s
    for s in (
        SystemShape("POD4", num_ipus=4, max_hosts=1, num_ilds=1, machines=1),
        SystemShape("POD16", num_ipus=16, max_hosts=1, num_ilds=1, machines=4),
        SystemShape("POD64", num_ipus=64, max_hosts=4, num_ilds=1, machines=16),
        SystemShape("POD128", num_ipus=128, max_hosts=8, num_ilds=2, machines=32),
        SystemShape("POD256", num_ipus=256, max_hosts=16, num_ilds=4, machines=64),
    )
}


def get_system(name: str) -> SystemShape:
    """Look a system up by name, case-insensitively (``pod16`` works)."""
    key = name.strip().upper()
    if key not in SYSTEMS:
        raise ConfigError(
            f"unknown system {name!r}: choose one of {', '.join(SYSTEMS)} (for example --system POD16)"
        )
    return SYSTEMS[key]


def is_power_of_two(n: int) -> bool:
    """IPU partitions, multi-IPU devices and replica counts come in powers of two (docs/sources.md §4)."""
    return n > 0 and n & (n - 1) == 0


def smallest_system_for(num_ipus: int) -> SystemShape:
    """The smallest POD that holds ``num_ipus`` IPUs."""
    for shape in sorted(SYSTEMS.values(), key=lambda s: s.num_ipus):
        if shape.num_ipus >= num_ipus:
            return shape
    largest = max(SYSTEMS.values(), key=lambda s: s.num_ipus)
    raise ConfigError(
        f"the job needs {num_ipus} IPUs but the largest simulated system, {largest.name}, has "
        f"{largest.num_ipus}: reduce --num-replicas or --ipus-per-replica"
    )
