"""A Kafka security protocol that does not match the broker's listener (issue 27): TLS
against a PLAINTEXT listener, or plaintext against a TLS one, never answers, and no retry
can fix it. It is bad settings (exit 2, one line naming the likely mismatch), not a
broker that is down (exit 3)."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import Services, Workspace, processes_mentioning, refused

SASL = {
    "COACH_STREAM_KAFKA_SASL_MECHANISM": "PLAIN",
    "COACH_STREAM_KAFKA_SASL_USERNAME": "someone",
    "COACH_STREAM_KAFKA_SASL_PASSWORD": "not-a-real-secret",
}


@pytest.mark.integration
@pytest.mark.parametrize(
    ("protocol", "command"),
    [("SSL", ["replay", "inspect"]), ("SASL_SSL", ["launch", "cartpole-ppo", "--run-id"])],
    ids=["ssl-replay-inspect", "sasl_ssl-launch"],
)
def test_tls_against_a_plaintext_broker_is_bad_settings(
    ws: Workspace, services: Services, run_id: str, protocol: str, command: list[str]
) -> None:
    ws.env["COACH_STREAM_KAFKA_SECURITY_PROTOCOL"] = protocol
    if protocol.startswith("SASL_"):
        ws.env.update(SASL)
    extra = ["--state-dir", str(ws.state_dir), "--checkpoints", str(ws.cwd / "ckpt")]
    result = ws.run(
        *command, run_id, "--kafka", services.kafka, *(extra if command[0] == "launch" else [])
    )
    refused(
        result,
        says=f"does not speak TLS, but COACH_STREAM_KAFKA_SECURITY_PROTOCOL is {protocol}: "
        "the listener is likely PLAINTEXT or SASL_PLAINTEXT",
    )
    assert ws.run_dirs() == [] and not (ws.cwd / "ckpt").exists()
    assert processes_mentioning(run_id) == []


@pytest.fixture
def tls_listener(tmp_path: Path) -> Iterator[str]:
    """``127.0.0.1:PORT`` of a TLS server (self-signed) that completes any handshake and
    closes: what a plaintext Kafka client meets at a TLS listener."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    pem = tmp_path / "listener.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + cert.public_bytes(serialization.Encoding.PEM)
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem)
    server = socket.create_server(("127.0.0.1", 0))
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                return  # the server socket was closed
            connection.settimeout(5)
            try:
                with context.wrap_socket(connection, server_side=True):
                    pass
            except OSError:
                connection.close()  # librdkafka's plaintext request is no TLS hello

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    address = server.getsockname()
    yield f"127.0.0.1:{address[1]}"
    stopping.set()
    socket.create_connection(address).close()  # wakes the accept() to see `stopping`
    thread.join(timeout=10)
    server.close()


def test_plaintext_against_a_tls_listener_is_bad_settings(
    ws: Workspace, run_id: str, tls_listener: str
) -> None:
    result = ws.run("replay", "inspect", run_id, "--kafka", tls_listener)
    refused(
        result,
        says="expects TLS, but COACH_STREAM_KAFKA_SECURITY_PROTOCOL is PLAINTEXT: the listener "
        "is likely SSL or SASL_SSL",
    )


def test_a_broker_that_is_down_is_still_unavailable(ws: Workspace, run_id: str) -> None:
    ws.env["COACH_STREAM_KAFKA_SECURITY_PROTOCOL"] = "SSL"
    result = ws.run("replay", "inspect", run_id, "--kafka", "127.0.0.1:1")
    refused(result, says="Kafka at 127.0.0.1:1 did not answer", code=3)
