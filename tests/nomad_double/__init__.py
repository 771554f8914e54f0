"""A Nomad HTTP API test double: python-nomad talks to it over HTTP; tasks are real processes.

It lives in the tests and is never imported by the package. See README.md beside this file.
"""

from .double import NomadDouble, SpecMissingError, check_job, load_spec, spec_path
from .server import Fault, RecordedRequest, Violation

__all__ = [
    "Fault",
    "NomadDouble",
    "RecordedRequest",
    "SpecMissingError",
    "Violation",
    "check_job",
    "load_spec",
    "spec_path",
]
