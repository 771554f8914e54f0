"""Orchestrators: who starts a run's processes (local subprocesses or a Nomad job)."""

from coach_stream.orchestrators.local import LocalOrchestrator
from coach_stream.orchestrators.spec import (
    LaunchSettings,
    build_run_spec,
    new_run_id,
    warm_supervisor,
    warm_zygote,
)
from coach_stream.orchestrators.state import RunState, SupervisorConfig

__all__ = [
    "LaunchSettings",
    "LocalOrchestrator",
    "RunState",
    "SupervisorConfig",
    "build_run_spec",
    "new_run_id",
    "warm_supervisor",
    "warm_zygote",
]
