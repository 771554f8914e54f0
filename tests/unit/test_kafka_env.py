"""cli.kafka_env: Kafka's security from COACH_STREAM_KAFKA_*, one sentence when it is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach_stream.cli.kafka_env import (
    ENV_VARS,
    kafka_security,
    kafka_settings,
    nomad_task_env,
)
from coach_stream.errors import ConfigError
from coach_stream.transport.settings import KafkaSecurity

SECRET = "s3cret-MARKER-env"


def test_nothing_set_is_plaintext() -> None:
    assert kafka_security({}) == KafkaSecurity()
    assert kafka_settings("h:1", {}).security.protocol == "PLAINTEXT"


def test_every_variable_reaches_the_model(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "c.pem", "k.pem"))
    for path in (ca, cert, key):
        path.write_text("x")
    security = kafka_security({
        "COACH_STREAM_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "COACH_STREAM_KAFKA_SASL_MECHANISM": "scram-sha-256",
        "COACH_STREAM_KAFKA_SASL_USERNAME": "alice",
        "COACH_STREAM_KAFKA_SASL_PASSWORD": SECRET,
        "COACH_STREAM_KAFKA_SSL_CA_LOCATION": str(ca),
        "COACH_STREAM_KAFKA_SSL_CERTIFICATE_LOCATION": str(cert),
        "COACH_STREAM_KAFKA_SSL_KEY_LOCATION": str(key),
        "COACH_STREAM_KAFKA_SSL_KEY_PASSWORD": "kp",
        "COACH_STREAM_KAFKA_SSL_ENDPOINT_IDENTIFICATION": "none",
    })  # fmt: skip
    assert security.protocol == "SASL_SSL" and security.sasl_mechanism == "SCRAM-SHA-256"
    assert security.username == "alice" and security.password is not None
    assert security.password.get_secret_value() == SECRET
    assert (security.ssl_ca_location, security.ssl_key_location) == (ca, key)
    assert security.ssl_key_password is not None and not security.ssl_endpoint_identification
    assert set(ENV_VARS) == set(KafkaSecurity.model_fields)  # no field without a variable


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"COACH_STREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
         "COACH_STREAM_KAFKA_SECURITY_PROTOCOL SASL_SSL needs a SASL username and password; "
         "set COACH_STREAM_KAFKA_SASL_USERNAME and COACH_STREAM_KAFKA_SASL_PASSWORD"),
        ({"COACH_STREAM_KAFKA_SASL_PASSWORD": SECRET},
         "COACH_STREAM_KAFKA_SASL_PASSWORD is set but COACH_STREAM_KAFKA_SECURITY_PROTOCOL "
         "PLAINTEXT does not use SASL"),
        ({"COACH_STREAM_KAFKA_SECURITY_PROTOCOL": "SSL",
          "COACH_STREAM_KAFKA_SSL_CA_LOCATION": "/no/such.pem"},
         "COACH_STREAM_KAFKA_SSL_CA_LOCATION /no/such.pem is not a readable file"),
        ({"COACH_STREAM_KAFKA_SECURITY_PROTOCOL": "TLS"},
         "COACH_STREAM_KAFKA_SECURITY_PROTOCOL is not valid: Input should be"),
        ({"COACH_STREAM_KAFKA_SSL_ENDPOINT_IDENTIFICATION": "yes"}, "use https"),
    ],
)  # fmt: skip
def test_a_wrong_environment_is_one_config_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        kafka_security(env)
    text = str(refused.value)
    assert message in text
    assert SECRET not in text and "\n" not in text and "docs/security.md" in text


def test_no_address_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="No Kafka address"):
        kafka_settings(None, {})


def test_nomad_jobs_get_no_credentials(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    security = KafkaSecurity(
        protocol="SASL_SSL", username="alice", password=SECRET, ssl_ca_location=ca
    )
    with pytest.raises(ConfigError, match="--secrets-var") as refused:
        nomad_task_env(security, None)
    assert "COACH_STREAM_KAFKA_SASL_USERNAME, COACH_STREAM_KAFKA_SASL_PASSWORD" in str(
        refused.value
    )
    env = nomad_task_env(security, "coach-stream/kafka")
    assert env == {
        "COACH_STREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "COACH_STREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "COACH_STREAM_KAFKA_SSL_CA_LOCATION": str(ca),
        "COACH_STREAM_KAFKA_SSL_ENDPOINT_IDENTIFICATION": "https",
    }
    assert nomad_task_env(KafkaSecurity(), None) == {}
    assert nomad_task_env(KafkaSecurity(protocol="SSL"), None) == {
        "COACH_STREAM_KAFKA_SECURITY_PROTOCOL": "SSL",
        "COACH_STREAM_KAFKA_SSL_ENDPOINT_IDENTIFICATION": "https",
    }
