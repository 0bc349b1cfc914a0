"""Jia et al.'s measurements of the Mk1 GC2 IPU, as far as a readable copy states them.

The paper: Zhe Jia, Blake Tillman, Marco Maggioni, Daniele P. Scarpazza, "Dissecting the Graphcore IPU
Architecture via Microbenchmarking", Citadel technical report, arXiv:1912.03413, 7 Dec 2019 (Mk1 GC2
IPUs on C2 boards, 1216 tiles at 1.6 GHz). The paper's own text is not quoted here: every figure comes
through a **secondary** source that quotes or paraphrases it (a blog series on the paper, and public
reading notes), named with the section of the paper it reports on; ``JiaFigure.primary`` is False for
all of them.

What the secondary sources do not give, and so stays unchecked: the absolute tile-to-tile and
IPU-to-IPU latencies (the blog reproduces the paper's Table 4.2 as an image, not as text), the
on-chip sync latency, the measured exchange and IPU-Link bandwidths, and the all-reduce and other
collective curves.
"""

from __future__ import annotations

from dataclasses import dataclass

APAPERADAY_SUBSYSTEMS = "https://www.apaperaday.com/12/17/2019/4dtgcipu-second/"
APAPERADAY_LOCAL_MEMORY = "https://www.apaperaday.com/12/20/2019/4dtgcipu-5localmemory/"
APAPERADAY_INTERCONNECT = "https://www.apaperaday.com/12/21/2019/4dtcipu-6interconnect/"
HPC_PAPER_NOTES = ("https://github.com/mabdullahsoyturk/HPC-Paper-Notes/blob/master/papers/"
                   "Dissecting-the-Graphcore-IPU-Architecture/README.md")
HPC_PAPER_NOTES_FIGURE = ("https://github.com/mabdullahsoyturk/HPC-Paper-Notes/blob/master/papers/"
                          "Dissecting-the-Graphcore-IPU-Architecture/figures/architecture.png")


@dataclass(frozen=True)
class JiaFigure:
    """One figure of the paper: its value, where it is stated, and which part of the paper it reports."""

    value: float
    unit: str
    url: str
    section: str
    quote: str
    primary: bool = False

    def cite(self) -> str:
        kind = "primary" if self.primary else "secondary"
        return f"Jia et al. 2019 {self.section}, via {self.url} ({kind}: \"{self.quote}\")"


# Local memory (the paper's chapters 1 and 3): 45 TB/s in all; each tile reads 16 B and writes 8 B per cycle.
MEMORY_AGGREGATE_BYTES_PER_S = JiaFigure(
    45e12, "B/s", APAPERADAY_SUBSYSTEMS, "ch. 1 memory architecture",
    "the nominal aggregate bandwidth for the entire IPU memory is 45 TB/s, with a latency of 6 clock cycles")
MEMORY_READ_BYTES_PER_CYCLE = JiaFigure(
    16, "B/cycle/tile", APAPERADAY_LOCAL_MEMORY, "ch. 3 local memory, Table 3.1",
    "The theoretical bandwidth is 31.1 TB/s, which is the product of each tiles read of 16 bytes per clock")
MEMORY_WRITE_BYTES_PER_CYCLE = JiaFigure(
    8, "B/cycle/tile", APAPERADAY_LOCAL_MEMORY, "ch. 3 local memory, write bandwidth",
    "Each tile is spec'ed to write 8 bytes per clock cycle ... 15.5 TB/s is the expected write bandwidth")

# IPU-Links (the paper's chapter 1 architecture): the links joining the two IPUs of a C2 board.
IPU_LINK_BIDIRECTIONAL_BYTES_PER_S = JiaFigure(
    64e9, "B/s per link, both directions", HPC_PAPER_NOTES, "ch. 1 architecture (C2 board)",
    "The 2 IPUs on each board are connected by three links with a nominal bidirectional bandwidth of "
    "64 GB/s each")
# The chip floorplan figure (ch. 1) as the notes reproduce it: IPU-Link blocks around the tile array.
IPU_LINKS_PER_CHIP = JiaFigure(
    10, "links", HPC_PAPER_NOTES_FIGURE, "ch. 1 architecture, chip floorplan figure",
    "10 blocks labelled IPU Link (4 on the left beside 2 PCI Link blocks, 6 on the right), counted")

# Point-to-point latency under load (the paper's chapter 4, Table 4.2): full load over no load.
ON_CHIP_LATENCY_LOADED_OVER_IDLE = JiaFigure(
    1.24, "x (full load / no load)", APAPERADAY_INTERCONNECT, "ch. 4 point-to-point latency, Table 4.2",
    "Congestion increases on-chip latency only marginally (+24%)")
IPU_LINK_LATENCY_LOADED_OVER_IDLE_MIN = JiaFigure(
    4.0, "x (full load / no load)", APAPERADAY_INTERCONNECT, "ch. 4 point-to-point latency, Table 4.2",
    "affects off chip IPU link latency significantly with slowdowns of 4.0…7.7x")
IPU_LINK_LATENCY_LOADED_OVER_IDLE_MAX = JiaFigure(
    7.7, "x (full load / no load)", APAPERADAY_INTERCONNECT, "ch. 4 point-to-point latency, Table 4.2",
    "affects off chip IPU link latency significantly with slowdowns of 4.0…7.7x")
