"""Serving ``/metrics`` the way the manager's config asks: HTTPS behind authentication and
authorization by default, plain HTTP only when ``metrics.secure`` is false.

Owns ``serve_metrics`` and ``tls_context``. The serving certificate is ``tls.crt`` and
``tls.key`` from ``metrics.certDir`` (a mounted Secret, such as one cert-manager writes) or, when
no directory is given, a self-signed one made at start for the pod's lifetime (what
controller-runtime does; Prometheus then scrapes with ``insecure_skip_verify`` or the mounted
certificate's CA). Every request is put to ``MetricsAuthorizer`` (TokenReview plus
SubjectAccessReview). Side effects: a listening socket; a temporary key file while the
self-signed certificate loads (deleted at once).
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CONTENT_TYPE_LATEST

from nodewright.runtime.kube.client import Client
from nodewright.runtime.observe.metrics import HttpServer, Metrics, PlainHandler
from nodewright.runtime.process.config import MetricsConfig
from nodewright.runtime.process.metrics_auth import MetricsAuthorizer

__all__ = ["self_signed_certificate", "serve_metrics", "tls_context"]

METRICS_PATH = "/metrics"


def self_signed_certificate(host_names: list[str]) -> tuple[bytes, bytes]:
    """A fresh EC P-256 key and a one-year self-signed certificate for ``host_names`` (PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host_names[0])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in host_names]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def tls_context(cert_dir: str) -> ssl.SSLContext:
    """A TLS 1.2+ server context from ``cert_dir``/tls.{crt,key}, or self-signed when empty."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir:
        directory = Path(cert_dir)
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
        return context
    certificate, key = self_signed_certificate(["nodewright-metrics", socket.gethostname(), "localhost"])
    with tempfile.TemporaryDirectory(prefix="nodewright-metrics-") as temporary:
        key_path = Path(temporary) / "tls.key"
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        certificate_path = Path(temporary) / "tls.crt"
        certificate_path.write_bytes(certificate)
        context.load_cert_chain(certificate_path, key_path)
        os.unlink(key_path)
    return context


def serve_metrics(metrics: Metrics, config: MetricsConfig, client: Client) -> HttpServer:
    """Serve ``/metrics`` on ``config.bind_address``: HTTPS with authorization when
    ``config.secure``, else plain HTTP to anyone (an explicit choice). Started on return."""
    if not config.secure:
        return metrics.serve(config.bind_address)
    authorizer = MetricsAuthorizer(client)

    class Handler(PlainHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            path = self.path.split("?")[0]
            if path != METRICS_PATH:
                self.reply(404, b"not found\n")
                return
            decision = authorizer.decide(self.headers.get("Authorization"), path)
            if decision.status != 200:
                self.reply(decision.status, f"{decision.reason}\n".encode())
                return
            self.reply(200, metrics.render(), CONTENT_TYPE_LATEST)

    return HttpServer(config.bind_address, Handler, "metrics", tls=tls_context(config.cert_dir))
