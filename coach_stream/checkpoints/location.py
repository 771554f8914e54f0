"""Where a checkpoint store is: the one parser of the addresses users give.

``gs://bucket[/prefix]`` is a GCS bucket (and a key prefix in it), ``file:///dir`` or a plain
path a local (or NFS) directory. ``open_store`` and the launcher's pre-flight check both
read an address through ``parse_store_url``, so they never disagree on what it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from coach_stream.errors import ConfigError


@dataclass(frozen=True)
class GcsLocation:
    """A GCS bucket and the prefix (no leading or trailing ``/``) the store's keys go under."""

    bucket: str
    prefix: str


def parse_store_url(url: str) -> GcsLocation | Path:
    """The bucket and prefix, or the directory, ``url`` names; ``ConfigError`` if none."""
    if not url:
        raise ConfigError(
            "the checkpoint store address is empty; give gs://bucket/prefix or a directory."
        )
    parsed = urlparse(url)
    if parsed.scheme == "gs":
        if not parsed.netloc:
            raise ConfigError(f"{url!r} names no bucket; write it as gs://BUCKET/PREFIX.")
        return GcsLocation(parsed.netloc, parsed.path.strip("/"))
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(
                f"{url!r} names host {parsed.netloc!r}; file URLs need three slashes: "
                "file:///absolute/dir."
            )
        return Path(unquote(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:  # "C:" on Windows is a drive, not a scheme
        raise ConfigError(
            f"checkpoint store scheme {parsed.scheme!r} in {url!r} is not supported; "
            "use gs://bucket/prefix, file:///dir or a plain directory path."
        )
    return Path(url)
