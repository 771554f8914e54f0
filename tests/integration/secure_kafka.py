"""A second, SCRAM-secured Kafka broker for the security tests (never the session's own).

It reuses the jars the local stack caches (``coach_stream.stack.kafka``) and Java 17, and
runs KRaft combined mode in a temporary directory on free ports, with two client listeners
and no unauthenticated one:

- ``SASL_PLAINTEXT`` (SCRAM-SHA-512);
- ``SASL_SSL`` (SCRAM-SHA-512 over TLS), with a self-signed certificate for 127.0.0.1
  made with ``cryptography`` and loaded as a PEM keystore.

The SCRAM users are written at format time (``kafka-storage format --add-scram``), so the
broker accepts them from its first second; the broker itself talks to itself over the
SASL_PLAINTEXT listener as ``admin``. Ready means a metadata request with the right
credentials answered, polled with a deadline.
"""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from coach_stream import processes
from coach_stream.stack import default_cache_dir, kafka
from coach_stream.transport.settings import KafkaSecurity, KafkaSettings

ADMIN = ("admin", "admin-secret-not-the-marker")
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class SecureBroker:
    """Addresses and credentials of the running broker."""

    sasl_plaintext: str
    sasl_ssl: str
    ca: Path
    """The broker's self-signed certificate, which is also its CA."""
    username: str
    password: str
    home: Path
    record: processes.ProcessRecord

    def security(self, *, tls: bool = False, password: str | None = None) -> KafkaSecurity:
        return KafkaSecurity(
            protocol="SASL_SSL" if tls else "SASL_PLAINTEXT",
            username=self.username,
            password=self.password if password is None else password,
            ssl_ca_location=self.ca if tls else None,
        )

    def settings(self, *, tls: bool = False, password: str | None = None) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=self.sasl_ssl if tls else self.sasl_plaintext,
            linger_ms=5,
            security=self.security(tls=tls, password=password),
        )

    def env(self, *, tls: bool = False, password: str | None = None) -> dict[str, str]:
        """The ``COACH_STREAM_KAFKA_*`` variables a user would export for this broker."""
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": self.sasl_ssl if tls else self.sasl_plaintext,
            "COACH_STREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL" if tls else "SASL_PLAINTEXT",
            "COACH_STREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "COACH_STREAM_KAFKA_SASL_USERNAME": self.username,
            "COACH_STREAM_KAFKA_SASL_PASSWORD": self.password if password is None else password,
        }
        if tls:
            env["COACH_STREAM_KAFKA_SSL_CA_LOCATION"] = str(self.ca)
        return env


def jars() -> Path | None:
    """The stack's cached Kafka jars, or None when they were never provisioned."""
    libs = default_cache_dir() / "kafka" / kafka.KAFKA_VERSION / "libs"
    return libs if (libs / ".complete").exists() else None


def _self_signed(home: Path) -> tuple[Path, Path]:
    """(certificate, keystore): a certificate for 127.0.0.1/localhost and key + chain PEM."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    san = x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    ca, keystore = home / "ca.pem", home / "keystore.pem"
    ca.write_bytes(cert_pem)
    keystore.write_bytes(key_pem + cert_pem)
    keystore.chmod(0o600)
    return ca, keystore


def _properties(home: Path, keystore: Path, ports: tuple[int, int, int]) -> str:
    plain, tls, controller = ports
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN[0]}" password="{ADMIN[1]}";'
    )
    listeners = f"""\
listeners=SASL_PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{tls},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{tls}
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={jaas}
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas}
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
"""
    return kafka.single_node_properties(home / "data", controller, listeners)


def start(home: Path, libs: Path, username: str, password: str) -> SecureBroker:
    """Format and start the broker; raise ``RuntimeError`` with its log if it does not come up."""
    home.mkdir(parents=True, exist_ok=True)
    java = kafka.find_java()
    ca, keystore = _self_signed(home)
    ports = (processes.free_port(), processes.free_port(), processes.free_port())
    layout = kafka.KafkaLayout(libs, home)
    layout.config.write_text(_properties(home, keystore, ports))
    layout.log4j_config.write_text(kafka._LOG4J.format(log=layout.log))
    users = [f"SCRAM-SHA-512=[name={n},password={p}]" for n, p in (ADMIN, (username, password))]
    formatted = subprocess.run(
        [
            java, "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format", "--standalone",
            "-t", kafka._cluster_id(), "-c", str(layout.config),
            *(arg for user in users for arg in ("--add-scram", user)),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if formatted.returncode != 0:
        raise RuntimeError(f"kafka-storage format failed: {formatted.stderr[-2000:]}")
    record = kafka.start(layout)
    broker = SecureBroker(
        sasl_plaintext=f"127.0.0.1:{ports[0]}",
        sasl_ssl=f"127.0.0.1:{ports[1]}",
        ca=ca,
        username=username,
        password=password,
        home=home,
        record=record,
    )
    try:
        _wait_ready(broker, layout)
    except BaseException:
        processes.stop(record, grace_s=10.0)
        raise
    return broker


def _wait_ready(broker: SecureBroker, layout: kafka.KafkaLayout) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config = {**broker.settings().admin_config(), "log_level": 0, "error_cb": lambda _e: None}
    admin = AdminClient(config)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if not broker.record.is_alive():
            raise RuntimeError(f"the SCRAM broker exited: {processes.tail(layout.log)}")
        try:
            if admin.list_topics(timeout=2.0).brokers:
                return
        except KafkaException:
            pass  # not listening yet: ask again until the deadline
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"the SCRAM broker did not answer within {START_TIMEOUT_S:.0f} s: "
                f"{processes.tail(layout.log)}"
            )


def stop(broker: SecureBroker) -> None:
    processes.stop(broker.record, grace_s=15.0)
