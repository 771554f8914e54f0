"""Kafka settings for the commands: read from the environment (``transport.environment``),
and the part of them a Nomad job may carry (``nomad_task_env``). See docs/security.md."""

from __future__ import annotations

from coach_stream.errors import ConfigError
from coach_stream.transport.environment import (
    CREDENTIALS,
    ENV_VARS,
    PREFIX,
    kafka_security,
    kafka_settings,
)
from coach_stream.transport.settings import KafkaSecurity

__all__ = [
    "CREDENTIALS",
    "ENV_VARS",
    "PREFIX",
    "kafka_security",
    "kafka_settings",
    "nomad_task_env",
]


def nomad_task_env(security: KafkaSecurity, secrets_var: str | None) -> dict[str, str]:
    """The security variables a Nomad job may carry: everything but the credentials.

    Credentials (SASL username and password, the TLS key's password) reach the tasks only
    from the Nomad Variable ``secrets_var`` (its items become their environment); without
    one, a launch that has credentials is refused rather than writing them into the job.
    """
    held = [ENV_VARS[f] for f in CREDENTIALS if getattr(security, f) is not None]
    if held and not secrets_var:
        items = " ".join(f"{var}=..." for var in held)
        raise ConfigError(
            f"{', '.join(held)} must not be written into a Nomad job; store them in a Nomad "
            f"Variable (`nomad var put nomad/jobs/coach-stream-RUN {items}`) and pass its "
            "path with --secrets-var (see docs/security.md)."
        )
    if security.protocol == "PLAINTEXT":
        return {}
    env: dict[str, str] = {ENV_VARS["protocol"]: security.protocol}
    if security.sasl:
        env[ENV_VARS["sasl_mechanism"]] = security.sasl_mechanism
    if security.tls:
        check = "https" if security.ssl_endpoint_identification else "none"
        env[ENV_VARS["ssl_endpoint_identification"]] = check
    for field in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location"):
        if (path := getattr(security, field)) is not None:
            env[ENV_VARS[field]] = str(path)
    return env
