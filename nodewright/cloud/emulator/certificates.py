"""Throwaway TLS material for the emulator: a self-signed CA and a serving certificate for loopback.

The CA certificate is written to a PEM file that clients trust explicitly (azure-core's
``connection_verify=<file>``); TLS verification is never turned off. Keys are EC P-256, so
issuing takes milliseconds; the CA is :mod:`~nodewright.cloud.emulator.pki`'s. Pure generation
plus one method that writes files.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from nodewright.cloud.emulator.pki import CertificateAuthority

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


def issue_loopback_certificates(common_name: str = "nodewright-arm-emulator") -> LoopbackCertificates:
    """Generate a fresh CA and a loopback serving certificate signed by it."""
    authority = CertificateAuthority(f"{common_name} CA", validity=_VALIDITY)
    server = authority.issue(
        common_name, dns_names=("localhost",), ip_addresses=("127.0.0.1", "::1"), server=True
    )
    return LoopbackCertificates(
        ca_pem=authority.cert_pem, certificate_pem=server.cert_pem, key_pem=server.key_pem
    )
