"""Throwaway TLS material for the emulator: a self-signed CA and a serving certificate for loopback.

The CA certificate is written to a PEM file that clients trust explicitly (azure-core's
``connection_verify=<file>``); TLS verification is never turned off. Keys are EC P-256, so
issuing takes milliseconds. Pure generation plus one function that writes files.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateFiles", "LoopbackCertificates", "issue_loopback_certificates"]

_VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class CertificateFiles:
    """Where the PEM files were written."""

    ca_file: Path
    certificate_file: Path
    key_file: Path


@dataclass(frozen=True)
class LoopbackCertificates:
    """A CA certificate and a serving certificate (with its key) for 127.0.0.1, ::1 and localhost."""

    ca_pem: bytes
    certificate_pem: bytes
    key_pem: bytes

    def write(self, directory: Path) -> CertificateFiles:
        """Write the three PEM files into ``directory`` (created if missing); the key is mode 0600."""
        directory.mkdir(parents=True, exist_ok=True)
        files = CertificateFiles(
            ca_file=directory / "emulator-ca.pem",
            certificate_file=directory / "emulator-server.pem",
            key_file=directory / "emulator-server-key.pem",
        )
        files.ca_file.write_bytes(self.ca_pem)
        # The chain lets clients that trust only the CA verify the leaf.
        files.certificate_file.write_bytes(self.certificate_pem + self.ca_pem)
        files.key_file.touch(mode=0o600)
        files.key_file.write_bytes(self.key_pem)
        return files


def _private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def issue_loopback_certificates(common_name: str = "nodewright-arm-emulator") -> LoopbackCertificates:
    """Generate a fresh CA and a loopback serving certificate signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name} CA")])
    ca_certificate = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    alternative_names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    server_certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return LoopbackCertificates(
        ca_pem=ca_certificate.public_bytes(serialization.Encoding.PEM),
        certificate_pem=server_certificate.public_bytes(serialization.Encoding.PEM),
        key_pem=_private_key_pem(server_key),
    )
