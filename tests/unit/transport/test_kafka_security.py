"""KafkaSecurity: validated once, librdkafka keys only in settings, secrets never shown."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from pydantic import ValidationError

from coach_stream.errors import AuthenticationError, ConfigError
from coach_stream.transport import clients
from coach_stream.transport.settings import KafkaSecurity, KafkaSettings

SECRET = "s3cret-MARKER-unit"


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")  # existence is what the model checks
    return path


def _sasl_ssl(ca: Path) -> KafkaSecurity:
    return KafkaSecurity(protocol="SASL_SSL", username="alice", password=SECRET, ssl_ca_location=ca)


def test_plaintext_adds_no_key() -> None:
    settings = KafkaSettings(bootstrap_servers="h:9092")
    assert settings.security == KafkaSecurity()
    assert not any(k.startswith(("security.", "sasl.", "ssl.")) for k in settings.admin_config())


def test_sasl_ssl_reaches_producer_consumer_and_admin(ca: Path) -> None:
    settings = KafkaSettings(bootstrap_servers="h:9092", security=_sasl_ssl(ca))
    expected = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    for config in (
        settings.producer_config(),
        settings.consumer_config("g"),
        settings.admin_config(),
    ):
        assert {k: config.get(k) for k in expected} == expected


def test_sasl_plaintext_sets_no_tls_key() -> None:
    security = KafkaSecurity(
        protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", username="u", password="p"
    )
    assert security.librdkafka_config() == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "u",
        "sasl.password": "p",
    }


def test_mutual_tls_and_no_host_check(tmp_path: Path, ca: Path) -> None:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("c")
    key.write_text("k")
    config = KafkaSecurity(
        protocol="SSL",
        ssl_ca_location=ca,
        ssl_certificate_location=cert,
        ssl_key_location=key,
        ssl_key_password="kp",
        ssl_endpoint_identification=False,
    ).librdkafka_config()
    assert config["ssl.certificate.location"] == str(cert)
    assert config["ssl.key.location"] == str(key)
    assert config["ssl.key.password"] == "kp"
    assert config["ssl.endpoint.identification.algorithm"] == "none"
    assert "sasl.username" not in config


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"protocol": "SASL_SSL"}, "needs a SASL username and password"),
        ({"protocol": "SASL_PLAINTEXT", "username": "u"}, "needs a SASL username and password"),
        ({"protocol": "SASL_SSL", "username": "u", "password": ""}, "needs a SASL username"),
        ({"username": "u", "password": "p"}, "are set but protocol PLAINTEXT does not use SASL"),
        ({"protocol": "SSL", "password": "p"}, "password is set but protocol SSL"),
        ({"protocol": "SASL_PLAINTEXT", "username": "u", "password": "p",
          "ssl_ca_location": "/etc/hostname"}, "does not use TLS"),
        ({"protocol": "SSL", "ssl_ca_location": "/no/such/ca.pem"}, "is not a readable file"),
        ({"protocol": "SSL", "ssl_certificate_location": "/etc/hostname"}, "go together"),
        ({"protocol": "SSL", "ssl_key_password": "x"}, "without ssl_key_location"),
        ({"protocol": "TLS"}, "Input should be"),
        ({"protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "username": "u", "password": "p"},
         "Input should be"),
    ],
)  # fmt: skip
def test_invalid_combinations_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        KafkaSecurity.model_validate(fields)


def test_messages_use_the_names_the_caller_gives() -> None:
    names = {"protocol": "PROTO_VAR", "username": "USER_VAR", "password": "PASS_VAR"}
    with pytest.raises(
        ValidationError, match=r"PROTO_VAR SASL_SSL needs .* set USER_VAR and PASS_VAR"
    ):
        KafkaSecurity.model_validate({"protocol": "SASL_SSL"}, context={"names": names})


def test_security_keys_cannot_come_through_extra() -> None:
    for key in ("sasl.password", "security.protocol", "ssl.key.password", "sasl.username"):
        with pytest.raises(ValidationError, match=r"belong in KafkaSettings\.security"):
            KafkaSettings(bootstrap_servers="h:9092", extra={key: "x"})


def test_secrets_never_show_in_repr_str_dumps_logs_or_errors(
    ca: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = KafkaSettings(
        bootstrap_servers="h:9092",
        security=KafkaSecurity(
            protocol="SASL_SSL", username="u", password=SECRET, ssl_ca_location=ca
        ),
    )
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("settings %s %r", settings, settings)
    shown = [repr(settings), str(settings), settings.model_dump_json(), str(settings.model_dump())]
    shown.append(caplog.text)
    with pytest.raises(ValidationError) as refused:  # the input is not quoted in the error
        KafkaSettings(bootstrap_servers="h", security={"protocol": "SSL", "password": SECRET})
    shown.append(str(refused.value))
    assert settings.admin_config()["sasl.password"] == SECRET  # the check below can fail
    assert all(SECRET not in text for text in shown)
    assert "**********" in repr(settings)


def test_a_refused_login_is_raised_by_the_error_callback() -> None:
    error = KafkaError(
        KafkaError._AUTHENTICATION,
        "sasl_plaintext://127.0.0.1:1/bootstrap: SASL authentication error: Authentication "
        "failed during authentication due to invalid credentials with SASL mechanism "
        "SCRAM-SHA-512 (after 312ms in state AUTH_REQ)",
    )
    with pytest.raises(AuthenticationError, match="refused this client's login") as refused:
        clients.on_error(error)
    assert isinstance(refused.value, ConfigError)  # exit code 2: no restart
    assert "after 312ms" not in str(refused.value) and "\n" not in str(refused.value)


def test_an_untrusted_certificate_is_raised_other_tls_errors_are_logged() -> None:
    verify = KafkaError(KafkaError._SSL, "SSL handshake failed: certificate verify failed")
    with pytest.raises(AuthenticationError, match="SSL_CA_LOCATION"):
        clients.on_error(verify)
    clients.on_error(KafkaError(KafkaError._SSL, "SSL handshake failed: unexpected eof"))
    clients.on_error(KafkaError(KafkaError._TRANSPORT, "Connection refused"))


def test_a_tls_file_librdkafka_cannot_read_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    settings = KafkaSettings(
        bootstrap_servers="127.0.0.1:1",
        security=KafkaSecurity(protocol="SSL", ssl_ca_location=bad),
    )
    with pytest.raises(ConfigError, match=r"ssl\.ca\.location"):
        clients.producer(settings)
    with pytest.raises(ConfigError, match=r"ssl\.ca\.location"):
        clients.consumer(settings, "g")
    with pytest.raises(ConfigError, match=r"ssl\.ca\.location"), clients.admin(settings):
        pass
