"""Where Nomad is and how to reach it: ``NomadConnection``, read as the ``nomad`` CLI does.

Only the CLI reads the environment (``NomadConnection.from_env(os.environ, ...)``); the
orchestrator receives the connection. Bad addresses and missing TLS files are refused
here, as one ``ConfigError`` / ``OrchestratorError`` naming the variable to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import nomad
from coach_stream.errors import ConfigError, OrchestratorError


@dataclass(frozen=True)
class NomadConnection:
    """Where Nomad is and how to talk to it, as the ``nomad`` CLI reads it."""

    address: str = "http://127.0.0.1:4646"
    token: str | None = None
    namespace: str | None = None
    region: str | None = None
    cacert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    timeout_s: int = 10

    @classmethod
    def from_env(cls, env: Mapping[str, str], **flags: str | None) -> NomadConnection:
        """Flags win over ``NOMAD_ADDR``, ``NOMAD_TOKEN``, ``NOMAD_NAMESPACE``,
        ``NOMAD_REGION``, ``NOMAD_CACERT``, ``NOMAD_CLIENT_CERT``, ``NOMAD_CLIENT_KEY``."""
        names = {
            "address": "NOMAD_ADDR",
            "token": "NOMAD_TOKEN",
            "namespace": "NOMAD_NAMESPACE",
            "region": "NOMAD_REGION",
            "cacert": "NOMAD_CACERT",
            "client_cert": "NOMAD_CLIENT_CERT",
            "client_key": "NOMAD_CLIENT_KEY",
        }
        values = {key: flags.get(key) or env.get(var) or None for key, var in names.items()}
        address = values.pop("address") or cls.address
        if "://" not in address:
            address = f"http://{address}"
        if bool(values["client_cert"]) != bool(values["client_key"]):
            raise OrchestratorError(
                "NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY go together; set both or neither."
            )
        for key in ("cacert", "client_cert", "client_key"):
            _check_file(names[key], values[key])
        return cls(
            address=_checked_address(address),
            token=values["token"],
            namespace=values["namespace"],
            region=values["region"],
            cacert=values["cacert"],
            client_cert=values["client_cert"],
            client_key=values["client_key"],
        )

    def client(self) -> nomad.Nomad:
        cert: tuple[str, ...] = ()
        if self.client_cert and self.client_key:
            cert = (self.client_cert, self.client_key)
        return nomad.Nomad(
            address=self.address,
            token=self.token,
            namespace=self.namespace,
            region=self.region,
            timeout=self.timeout_s,
            # requests' meaning: a CA bundle path, or True for the system's CAs.
            verify=self.cacert or True,
            cert=cert,
        )


def _check_file(variable: str, path: str | None) -> None:
    """A TLS file named by ``NOMAD_CACERT`` & co. is a readable file (requests would raise)."""
    if path is not None and not Path(path).is_file():
        raise ConfigError(
            f"{variable} (or its flag) names {path}, which is not a file; give the PEM "
            f"file's path or unset {variable}."
        )


def _checked_address(address: str) -> str:
    """``NOMAD_ADDR`` as a URL Nomad can be reached at; a ``ConfigError`` (bad input)."""
    parsed = urlparse(address)
    try:
        parsed.port  # noqa: B018  (raises ValueError on a port that is not a number)
    except ValueError:
        parsed = parsed._replace(netloc="")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"NOMAD_ADDR (or --nomad-addr) {address!r} is not an http(s)://HOST:PORT address; "
            "fix it, e.g. http://127.0.0.1:4646."
        )
    return address.rstrip("/")
