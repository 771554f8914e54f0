"""Policy weights <-> bytes: the one place policy checkpoints are (de)serialized.

(The trainer's resume state has its own format, in ``coach_stream.trainer.state``, read
with the same ``weights_only=True`` rule.)

Workers load what the trainer announced, so the load side must never run code from the
file: ``torch.load(weights_only=True)`` accepts tensors and plain containers only (the
original Coach loaded pickles). Any failure to load becomes an ``IntegrityError`` so a
caller can reject the version and keep acting with its current policy.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

from coach_stream.errors import IntegrityError

# torch is imported inside the two functions: `launch` lists the store (to check the run id
# is free) without ever (de)serializing, and importing torch there cost 3-9 s per launch.


def policy_to_bytes(state_dict: Mapping[str, object]) -> bytes:
    """Serialize a ``state_dict`` (tensors, plain containers) with ``torch.save``."""
    import torch

    buffer = io.BytesIO()
    torch.save(dict(state_dict), buffer)
    return buffer.getvalue()


def policy_from_bytes(blob: bytes) -> dict[str, object]:
    """Load a ``state_dict`` safely (``weights_only=True``, CPU tensors).

    Raises ``IntegrityError`` when the bytes are not a weights-only torch file or do not
    hold a mapping of names to values.
    """
    import torch

    try:
        loaded = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types: pickle, zip, RuntimeError, ...
        raise IntegrityError(
            f"checkpoint bytes are not a weights-only torch state_dict ({exc.__class__.__name__}: "
            f"{str(exc)[:200]}); write it with coach_stream.checkpoints.policy_to_bytes."
        ) from exc
    if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
        raise IntegrityError(
            f"checkpoint holds a {type(loaded).__name__}, not a state_dict of named tensors; "
            "write it with coach_stream.checkpoints.policy_to_bytes."
        )
    return loaded
