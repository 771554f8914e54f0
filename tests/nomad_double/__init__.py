"""A Nomad HTTP API test double: python-nomad talks to it over HTTP; tasks are real processes.

It lives in the tests and is never imported by the package. See README.md beside this file.
"""

from .double import NomadDouble, SpecMissingError, load_spec, spec_path
from .server import RecordedRequest, Violation

__all__ = [
    "NomadDouble",
    "RecordedRequest",
    "SpecMissingError",
    "Violation",
    "load_spec",
    "spec_path",
]
