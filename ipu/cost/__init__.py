"""The cost model: what a run would take on a real IPU-POD, from how Poplar compiles and runs the graph.

It holds the per-layer work as Poplar builds it (planned convolutions, vertex and vector cycle
estimates, bulk-synchronous supersteps, per-tensor update work), the prediction that sums it over
the pipeline schedule (``prediction.predict``) under its assumed numbers (``assumptions.Assumptions``),
its per-layer breakdown, and the public measurements it is checked against (``validation``). It reads the device model (specs, plan,
pipeline) and never the runtime.
"""
