"""Seeing a run: its tasks' telemetry folded into a status view, Prometheus metrics, and
TensorBoard/CSV scalars (docs/observability.md).

Everything here is a function of the events the tasks publish (``transport.telemetry``)
plus, for ``status``, a few figures asked of the broker (``transport.lag``), so a run is
seen the same way whichever orchestrator started it and wherever its tasks run.
"""
