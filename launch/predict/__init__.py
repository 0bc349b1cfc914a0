"""``poprun-ipu``: the memory fit and predicted POD cost of a configuration without training, what-if
sweeps of its plan, the per-layer profile and the cost model's validation. Built on ``launch.train``
(configurations, the plan of a configuration), which never imports it."""
