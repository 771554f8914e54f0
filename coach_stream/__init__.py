"""coach_stream: distributed reinforcement learning whose experience flows through Kafka."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("coach-stream")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
