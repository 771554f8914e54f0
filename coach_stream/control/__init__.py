"""Policy versions on the control topic: the trainer's announcer and the workers' source.

The trainer writes a checkpoint create-only, reads it back to verify its sha256, and only
then announces it (``Announcer``); workers load the newest announced version, verify it
again and swap (``CheckpointPolicySource``). A store outage or a bad object therefore
never makes a worker act with a missing or different policy.
"""

from __future__ import annotations

from coach_stream.control.announcer import Announcer
from coach_stream.control.policy_source import CheckpointPolicySource

__all__ = ["Announcer", "CheckpointPolicySource"]
