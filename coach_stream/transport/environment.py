"""Kafka's address and security from the environment: the one place they are read.

Every command that talks to Kafka (``launch``, ``train``, ``rollout`` and the evaluator,
``status``, ``replay``, the Nomad paths) and the library's own entry points
(``coach_stream.replay.open``) build their ``KafkaSettings`` with ``kafka_settings`` here,
so a secured broker works the same for all of them. Secrets travel only through the
environment, never on a command line: a task's argv is written to ``run.json`` and shown
by ``status`` and Nomad, while the local orchestrator's tasks inherit the launcher's
environment. On Nomad the credentials come from a Nomad Variable (``--secrets-var``);
``cli.kafka_env.nomad_task_env`` refuses to put them into a job. See docs/security.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import ValidationError

from coach_stream.errors import ConfigError
from coach_stream.transport.settings import KafkaSecurity, KafkaSettings, broker_address

PREFIX = "COACH_STREAM_KAFKA_"
ENV_VARS: dict[str, str] = {
    "protocol": f"{PREFIX}SECURITY_PROTOCOL",
    "sasl_mechanism": f"{PREFIX}SASL_MECHANISM",
    "username": f"{PREFIX}SASL_USERNAME",
    "password": f"{PREFIX}SASL_PASSWORD",
    "ssl_ca_location": f"{PREFIX}SSL_CA_LOCATION",
    "ssl_certificate_location": f"{PREFIX}SSL_CERTIFICATE_LOCATION",
    "ssl_key_location": f"{PREFIX}SSL_KEY_LOCATION",
    "ssl_key_password": f"{PREFIX}SSL_KEY_PASSWORD",
    "ssl_endpoint_identification": f"{PREFIX}SSL_ENDPOINT_IDENTIFICATION",
}
"""``KafkaSecurity`` field -> the environment variable it is read from."""

CREDENTIALS = ("username", "password", "ssl_key_password")
"""Fields that reach a Nomad job only through its Nomad Variable, never the job itself."""

_ENDPOINT_CHECK = {"https": True, "none": False}
_UPPER = ("protocol", "sasl_mechanism")


def kafka_security(environ: Mapping[str, str] | None = None) -> KafkaSecurity:
    """The ``COACH_STREAM_KAFKA_*`` variables as one validated ``KafkaSecurity``.

    Unset or empty variables keep the defaults (PLAINTEXT); anything invalid is one
    ``ConfigError`` naming the variable and the fix.
    """
    env = os.environ if environ is None else environ
    fields: dict[str, object] = {}
    for field, var in ENV_VARS.items():
        value = env.get(var, "").strip()
        if not value:
            continue
        if field == "ssl_endpoint_identification":
            if value.lower() not in _ENDPOINT_CHECK:
                raise ConfigError(
                    f"{var}={value!r} is not valid; use https (check the broker's host name, "
                    "the default) or none (see docs/security.md)."
                )
            fields[field] = _ENDPOINT_CHECK[value.lower()]
        else:
            fields[field] = value.upper() if field in _UPPER else value
    try:
        return KafkaSecurity.model_validate(fields, context={"names": ENV_VARS})
    except ValidationError as error:
        raise _describe(error) from None


def _describe(error: ValidationError) -> ConfigError:
    """One sentence from pydantic's first error; the input (a secret, maybe) is never quoted."""
    first = error.errors(include_input=False)[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["loc"]:  # a single variable's value (an unknown protocol or mechanism)
        var = ENV_VARS.get(str(first["loc"][0]), str(first["loc"][0]))
        return ConfigError(f"{var} is not valid: {message}; fix it (see docs/security.md).")
    return ConfigError(f"Kafka security settings: {message} (see docs/security.md).")


def kafka_settings(
    bootstrap_servers: str | None, environ: Mapping[str, str] | None = None
) -> KafkaSettings:
    """``KafkaSettings`` for ``--kafka`` (or ``KAFKA_BOOTSTRAP_SERVERS``) and the security
    variables; a missing address is a ``ConfigError`` saying how to give one."""
    if not bootstrap_servers:
        raise ConfigError(
            "No Kafka address; pass --kafka HOST:PORT or export KAFKA_BOOTSTRAP_SERVERS "
            "(`eval $(coach-stream stack env)` after `coach-stream stack up`)."
        )
    check_kafka_addresses(bootstrap_servers)
    return KafkaSettings(bootstrap_servers=bootstrap_servers, security=kafka_security(environ))


def check_kafka_addresses(bootstrap_servers: str) -> None:
    """Each comma-separated entry is an address librdkafka takes (``broker_address``). A
    malformed one would otherwise be tried until the first client's timeout and reported as
    a broker that did not answer."""
    for entry in bootstrap_servers.split(","):
        if broker_address(entry) is None:
            which = f" ({entry.strip()!r} is not)" if "," in bootstrap_servers else ""
            raise ConfigError(
                f"Kafka address {bootstrap_servers!r} is not HOST:PORT[,HOST:PORT...]{which}; "
                "fix --kafka or KAFKA_BOOTSTRAP_SERVERS."
            )
