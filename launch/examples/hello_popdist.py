"""A PopDist-style script: every instance reports its replicas and the instances all-reduce.

    poprun_py --num-instances 2 --num-replicas 4 python -m launch.examples.hello_popdist
"""

import numpy as np

import poprun_py as popdist


def main() -> None:
    popdist.init()
    index, count = popdist.getInstanceIndex(), popdist.getNumInstances()
    local, offset = popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset()
    print(f"instance {index}/{count}: replicas {list(range(offset, offset + local))} of "
          f"{popdist.getNumTotalReplicas()}, {popdist.getNumIpusPerReplica()} IPU(s) each, device {popdist.getDeviceId()}")
    comm = popdist.get_comm()
    value = np.array([float(index)])
    comm.allreduce(value, op="mean")
    expected = (count - 1) / 2
    if value[0] != expected:
        raise SystemExit(f"allreduce gave {value[0]}, expected {expected}")
    if index == 0:
        print(f"allreduce over {count} instance(s): mean of instance indices = {value[0]} (ok)")


if __name__ == "__main__":
    main()
