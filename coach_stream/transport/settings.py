"""Kafka settings; librdkafka's dotted keys exist only here (topic names: ``names``).

The rest of the code passes one frozen ``KafkaSettings`` around; the writer, reader and
admin turn it into librdkafka dictionaries at the last moment, with the delivery
guarantees of the design (idempotence, ``acks=all``, no auto-commit) fixed and not
overridable through ``extra``. How a client authenticates and encrypts (``KafkaSecurity``:
TLS, SASL SCRAM/PLAIN) is one validated sub-model whose secrets are ``SecretStr``: a
``repr``, a log line or a JSON dump of the settings shows ``**********``, and the clear
values exist only in the dictionaries handed to librdkafka.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from coach_stream.transport.names import RunTopics

ConfigValue = str | int | float | bool
_GUARANTEES = {
    "enable.idempotence",
    "acks",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "partitioner",  # transport.tail finds a key's partition by recomputing it
}
_CONNECTION_KEYS = ("security.", "sasl.", "ssl.", "socket.", "broker.", "client.")
# Set only through KafkaSettings.security, where secrets are SecretStr and the combination
# is validated; in ``extra`` they would show in every repr and bypass the checks.
_SECURITY_KEYS = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
    "sasl.oauthbearer.client.secret",
}

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]


class KafkaSecurity(BaseModel):
    """How clients authenticate to the broker (SASL) and encrypt the connection (TLS).

    Validated once: a SASL protocol needs a username and a password, credentials or TLS
    files a protocol would not use are refused rather than silently ignored, and every TLS
    file must exist. Error messages name each setting by ``names`` from the validation
    context when given (the CLI passes its environment variables' names), else by field.
    """

    # A validation error's text would otherwise quote its input: the password in clear.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "SCRAM-SHA-512"
    username: str | None = None
    password: SecretStr | None = None
    ssl_ca_location: Path | None = None
    """PEM file of the CA that signed the broker's certificate (default: the system's CAs)."""
    ssl_certificate_location: Path | None = None
    """This client's certificate (PEM), for brokers that require mutual TLS."""
    ssl_key_location: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_endpoint_identification: bool = True
    """Check that the broker's certificate names the host connected to (off: any host)."""

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> KafkaSecurity:
        names: dict[str, str] = dict((info.context or {}).get("names", {}))

        def name(field: str) -> str:
            return names.get(field, field)

        sasl_set = [f for f in ("username", "password") if getattr(self, f) is not None]
        if self.sasl and (not self.username or not _secret(self.password)):
            raise ValueError(
                f"{name('protocol')} {self.protocol} needs a SASL username and password; "
                f"set {name('username')} and {name('password')}"
            )
        if not self.sasl and sasl_set:
            verb = "is" if len(sasl_set) == 1 else "are"
            raise ValueError(
                f"{' and '.join(name(f) for f in sasl_set)} {verb} set but {name('protocol')} "
                f"{self.protocol} does not use SASL; set {name('protocol')} to SASL_SSL "
                "(or SASL_PLAINTEXT), or unset the credentials"
            )
        files = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")
        tls_set = [f for f in (*files, "ssl_key_password") if getattr(self, f) is not None]
        if not self.tls and tls_set:
            raise ValueError(
                f"{name(tls_set[0])} is set but {name('protocol')} {self.protocol} does not "
                f"use TLS; set {name('protocol')} to SSL or SASL_SSL, or unset it"
            )
        if (self.ssl_certificate_location is None) != (self.ssl_key_location is None):
            raise ValueError(
                f"{name('ssl_certificate_location')} and {name('ssl_key_location')} go "
                "together (a client certificate and its key); set both or neither"
            )
        if self.ssl_key_password is not None and self.ssl_key_location is None:
            raise ValueError(
                f"{name('ssl_key_password')} is set without {name('ssl_key_location')}; "
                "set the key's path or unset its password"
            )
        for field in files:
            path: Path | None = getattr(self, field)
            if path is not None and not (path.is_file() and os.access(path, os.R_OK)):
                raise ValueError(
                    f"{name(field)} {path} is not a readable file; give the path of a PEM "
                    "file that exists on this machine"
                )
        return self

    def librdkafka_config(self) -> dict[str, ConfigValue]:
        """The librdkafka keys (clear secrets included: hand it to a client, never log it)."""
        if self.protocol == "PLAINTEXT":
            return {}
        config: dict[str, ConfigValue] = {"security.protocol": self.protocol}
        if self.sasl:
            config["sasl.mechanism"] = self.sasl_mechanism
            config["sasl.username"] = self.username or ""
            config["sasl.password"] = _secret(self.password)
        if self.tls:
            optional = {
                "ssl.ca.location": self.ssl_ca_location,
                "ssl.certificate.location": self.ssl_certificate_location,
                "ssl.key.location": self.ssl_key_location,
            }
            config.update({k: str(v) for k, v in optional.items() if v is not None})
            if self.ssl_key_password is not None:
                config["ssl.key.password"] = _secret(self.ssl_key_password)
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification else "none"
            )
        return config


def _secret(value: SecretStr | None) -> str:
    return "" if value is None else value.get_secret_value()


def broker_address(entry: str) -> tuple[str, int] | None:
    """(host, port) of one bootstrap entry as librdkafka reads it: ``HOST[:PORT]``,
    ``[v6]:PORT``, a ``PROTOCOL://`` prefix, port 9092 when left out; None when malformed."""
    address = entry.strip().rpartition("://")[2]
    if address.endswith("]") or ":" not in address:
        host, port = address, "9092"
    else:
        host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


class KafkaSettings(BaseModel):
    """How to reach the broker and how to batch; validated once at the entry point."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    bootstrap_servers: str = Field(min_length=1)
    client_id: str = "coach-stream"
    compression: Literal["lz4", "zstd", "snappy", "gzip", "none"] = "none"
    """Off by default: float observations do not compress (a CartPole chunk's 528 bytes of
    observations deflate to 539), yet lz4 took ~10 % of a rollout loop's CPU and the broker
    decompresses every batch to validate it (zstd: ~40 % of a broker core). Choose lz4 or
    zstd for image observations, where it pays for itself."""
    linger_ms: int = Field(default=20, ge=0, le=60_000)
    """How long the producer waits to fill a batch: throughput for some latency. 20 ms cut
    the broker's CPU for a full-speed CartPole worker from ~25 % to ~8 % of a core vs 5 ms;
    a SYNC worker flushes at the end of each share, so on-policy runs pay no latency."""
    batch_size: int = Field(default=4_000_000, ge=1, le=2_147_483_647)
    """Largest produce batch per partition, in bytes."""
    max_message_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=1_000_000_000)
    """Largest record (an Atari-size chunk of 64 steps is ~1.8 MB); also the topic limit."""
    delivery_timeout_ms: int = Field(default=120_000, ge=1_000)
    request_timeout_ms: int = Field(default=30_000, ge=1_000)
    security: KafkaSecurity = Field(default_factory=KafkaSecurity)
    """TLS and SASL (default PLAINTEXT); the CLI reads it from ``COACH_STREAM_KAFKA_*``."""
    extra: dict[str, str] = Field(default_factory=dict)
    """Additional librdkafka settings; they cannot weaken the delivery guarantees, and
    security keys belong in ``security``."""

    @field_validator("extra")
    @classmethod
    def _no_weakened_guarantees(cls, value: dict[str, str]) -> dict[str, str]:
        fixed = sorted(_GUARANTEES & value.keys())
        if fixed:
            raise ValueError(f"{', '.join(fixed)} are fixed by coach_stream's delivery design")
        security = sorted(_SECURITY_KEYS & value.keys())
        if security:
            raise ValueError(
                f"{', '.join(security)} belong in KafkaSettings.security (KafkaSecurity), "
                "which validates them and keeps secrets out of logs"
            )
        return value

    def _common(self) -> dict[str, ConfigValue]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            # A new client first talks to the bootstrap address, then opens a connection to
            # the broker the metadata names, held back by the reconnect backoff (default
            # 100 ms, jittered): a fresh client's first answer took 60-77 ms, 26-31 ms with
            # 10. Every task makes a few clients on its way to version 0. Reconnecting to a
            # broker that is down still backs off exponentially, to reconnect.backoff.max.ms.
            "reconnect.backoff.ms": 10,
            **self.security.librdkafka_config(),
        }

    def producer_config(self) -> dict[str, ConfigValue]:
        return {
            **self._common(),
            "enable.idempotence": True,
            "acks": "all",
            # librdkafka's default, pinned: a key's partition is CRC-32(key) % partitions,
            # which a restarted worker recomputes to find its last chunk_seqs (tail.py).
            "partitioner": "consistent_random",
            "compression.type": self.compression,
            "linger.ms": self.linger_ms,
            "batch.size": self.batch_size,
            "batch.num.messages": 100_000,
            "message.max.bytes": self.max_message_bytes + 4096,
            "queue.buffering.max.kbytes": 1_048_576,
            "delivery.timeout.ms": self.delivery_timeout_ms,
            "request.timeout.ms": self.request_timeout_ms,
            **self.extra,
        }

    def consumer_config(self, group_id: str) -> dict[str, ConfigValue]:
        return {
            **self._common(),
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": max(52_428_800, self.max_message_bytes * 2),
            "max.partition.fetch.bytes": max(8_388_608, self.max_message_bytes),
            "receive.message.max.bytes": max(52_428_800, self.max_message_bytes * 2) + 65_536,
            "fetch.wait.max.ms": 50,
            "queued.max.messages.kbytes": 262_144,
            **self.extra,
        }

    def admin_config(self) -> dict[str, ConfigValue]:
        connection = {k: v for k, v in self.extra.items() if k.startswith(_CONNECTION_KEYS)}
        return {**self._common(), **connection}


__all__ = ["ConfigValue", "KafkaSecurity", "KafkaSettings", "RunTopics"]
