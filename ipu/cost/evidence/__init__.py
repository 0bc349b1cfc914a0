"""The public figures the cost model is checked against, kept apart from the model.

Each module holds one source's figures as the source states them, with where they come from:
``poplibs_benchmarks`` (poplibs' IPU Model benchmark table, op by op), ``tessellate_ipu`` (hardware
cycles of one AMP vertex and of reading the cycle counter), ``hardware_measurements`` (Graphcore's
profiling tutorial, BabelSTREAM on the IPU), ``jia2019`` (Jia et al.'s Mk1 figures as secondary
sources give them) and ``mlperf_v11`` (the MLPerf v1.1 ResNet-50 logs, the one calibration).
Nothing here imports the model; ``ipu.cost.validation`` and ``ipu.cost.op_validation`` set the two
side by side.
"""
