"""numpy arrays <-> the Avro ``Tensor`` record {dtype, shape, data}.

Elements travel as one little-endian C-order byte string, so decoding is a
``numpy.frombuffer`` view over the bytes Avro hands back (read-only, no further copy)
instead of one Avro datum per element. Every declared dtype, shape and byte count is
checked before the view is made, so a hostile record cannot yield a wrong array.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from coach_stream.errors import DecodeError, EncodeError

MAX_NDIM = 8
"""More dimensions than any RL observation needs; a larger rank is treated as corrupt."""

DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
}


def to_avro(array: npt.NDArray[Any], field: str) -> dict[str, Any]:
    """The Tensor record of ``array`` (C order, little-endian)."""
    if not isinstance(array, np.ndarray):
        raise EncodeError(
            f"Field {field} is a {type(array).__name__}, not a numpy array; pass np.asarray(...)."
        )
    name = array.dtype.name
    if name not in DTYPES:
        raise EncodeError(
            f"Field {field} has dtype {array.dtype}, which the wire format does not carry; "
            f"convert it to one of {', '.join(DTYPES)}."
        )
    if array.ndim > MAX_NDIM:
        raise EncodeError(f"Field {field} has {array.ndim} dimensions; at most {MAX_NDIM} travel.")
    if array.dtype.byteorder == ">":
        array = array.astype(DTYPES[name])
    return {"dtype": name, "shape": list(array.shape), "data": array.tobytes(order="C")}


def from_avro(record: dict[str, Any], field: str) -> npt.NDArray[Any]:
    """A read-only array viewing ``record['data']``, after checking dtype, shape and size."""
    dtype = DTYPES.get(record["dtype"])
    if dtype is None:
        raise DecodeError(f"Field {field} declares unknown dtype {record['dtype']!r}.")
    shape = record["shape"]
    if len(shape) > MAX_NDIM:
        raise DecodeError(f"Field {field} declares {len(shape)} dimensions (> {MAX_NDIM}).")
    count = 1
    for dim in shape:
        if dim < 0:
            raise DecodeError(f"Field {field} declares a negative dimension in shape {shape}.")
        count *= dim  # Python ints: a huge declared shape cannot overflow
    data = record["data"]
    if count * dtype.itemsize != len(data):
        raise DecodeError(
            f"Field {field} declares {dtype.name}{tuple(shape)} = {count * dtype.itemsize} "
            f"bytes but carries {len(data)}."
        )
    try:
        array = np.frombuffer(data, dtype=dtype).reshape(shape)
    except ValueError as exc:  # e.g. (2, 2**62, 0): no elements, yet too big for numpy
        raise DecodeError(
            f"Field {field} declares shape {tuple(shape)}, which no array can have ({exc})."
        ) from exc
    if dtype.kind == "b" and count and int(array.view(np.uint8).max()) > 1:
        raise DecodeError(f"Field {field} is bool but holds bytes other than 0 and 1.")
    return array
