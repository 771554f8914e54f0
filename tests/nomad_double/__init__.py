"""A Nomad HTTP API test double: python-nomad talks to it over HTTP; tasks are real processes.

It lives in the tests and is never imported by the package. See README.md beside this file.
"""

from .double import NomadDouble, check_job, shared_contract
from .server import Fault, RecordedRequest, Violation

__all__ = [
    "Fault",
    "NomadDouble",
    "RecordedRequest",
    "Violation",
    "check_job",
    "shared_contract",
]
