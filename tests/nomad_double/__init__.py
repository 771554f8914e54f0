"""A Nomad HTTP API test double: python-nomad talks to it over real HTTP, tasks run as real processes.

It lives in the tests and is never imported by the package. See README.md beside this file.
"""

from .double import NomadDouble, SpecMissing, load_spec, spec_path
from .server import RecordedRequest, Violation

__all__ = ["NomadDouble", "RecordedRequest", "SpecMissing", "Violation", "load_spec", "spec_path"]
