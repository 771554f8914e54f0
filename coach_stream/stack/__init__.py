"""The local stack of real services (Kafka, fake-gcs-server) behind `coach-stream stack`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from coach_stream.stack.manager import LocalStack, ServiceStatus

__all__ = ["LocalStack", "ServiceStatus", "default_cache_dir"]


def default_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$COACH_STREAM_CACHE``, else ``$XDG_CACHE_HOME/coach-stream``, else ``~/.cache/…``."""
    if explicit := environ.get("COACH_STREAM_CACHE"):
        return Path(explicit).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coach-stream"
