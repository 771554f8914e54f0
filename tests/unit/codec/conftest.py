"""Every codec test builds its registry and codecs anew.

``coach_stream.codec`` caches them per process, so without this only the first test to
encode would exercise their construction (schema expansion, fingerprints, the choice of
the fast paths) and a later test could not notice it breaking.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coach_stream import codec


@pytest.fixture(autouse=True)
def fresh_codecs() -> Iterator[None]:
    cached = (codec.default_registry, codec._chunk_codec, codec._control_codec)
    for function in cached:
        function.cache_clear()
    yield
