"""The images the emulator knows, and what Azure derives from an image when it builds a machine
from it: the OS type, the Hyper-V generation, the OS name and version the guest reports, the OS
disk size and the exact version ``latest`` resolves to.

:class:`ImageCatalog` holds marketplace images (publisher, offer, sku, versions; matched without
regard to case, as ARM does) and gallery image definitions (by image definition ID, with their
versions). Every new state starts with :data:`MARKETPLACE_IMAGES`, a few common marketplace
images; the estate builder and seed files add more. Pure data, no I/O; the state lock guards it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MARKETPLACE_IMAGES",
    "UNCATALOGUED",
    "ImageCatalog",
    "ImageFacts",
    "MarketplaceImage",
    "ResolvedImage",
]


@dataclass(frozen=True)
class ImageFacts:
    """What a machine built from an image inherits from it."""

    os_type: str = "Linux"
    hyper_v_generation: str = "V2"
    os_name: str = "ubuntu"
    os_version: str = "24.04"
    os_disk_size_gb: int = 30

    @property
    def windows(self) -> bool:
        return self.os_type.lower() == "windows"


@dataclass(frozen=True)
class MarketplaceImage:
    """A marketplace image SKU with its published versions."""

    publisher: str
    offer: str
    sku: str
    versions: tuple[str, ...]
    facts: ImageFacts = field(default_factory=ImageFacts)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.publisher.lower(), self.offer.lower(), self.sku.lower())


@dataclass(frozen=True)
class ResolvedImage:
    """An image reference matched in the catalog: the image's facts and the exact version."""

    facts: ImageFacts
    exact_version: str


# A gallery image nobody catalogued: a Linux Generation 2 image, as node images are.
UNCATALOGUED = ImageFacts()

_UBUNTU_2404 = ImageFacts("Linux", "V2", "ubuntu", "24.04", 30)
_UBUNTU_2204 = ImageFacts("Linux", "V2", "ubuntu", "22.04", 30)
_WINDOWS_2016 = ImageFacts("Windows", "V1", "Windows Server 2016 Datacenter", "10.0.14393", 127)
_WINDOWS_2019 = ImageFacts("Windows", "V1", "Windows Server 2019 Datacenter", "10.0.17763", 127)
_WINDOWS_2022 = ImageFacts("Windows", "V2", "Windows Server 2022 Datacenter Azure Edition", "10.0.20348", 127)


def _generation(facts: ImageFacts, generation: str) -> ImageFacts:
    return ImageFacts(facts.os_type, generation, facts.os_name, facts.os_version, facts.os_disk_size_gb)


MARKETPLACE_IMAGES: tuple[MarketplaceImage, ...] = (
    MarketplaceImage(
        "Canonical", "ubuntu-24_04-lts", "server", ("24.04.202409120", "24.04.202411030"), _UBUNTU_2404
    ),
    MarketplaceImage(
        "Canonical",
        "ubuntu-24_04-lts",
        "server-gen1",
        ("24.04.202409120", "24.04.202411030"),
        _generation(_UBUNTU_2404, "V1"),
    ),
    MarketplaceImage(
        "Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2", ("22.04.202410020",), _UBUNTU_2204
    ),
    MarketplaceImage(
        "Canonical",
        "0001-com-ubuntu-server-jammy",
        "22_04-lts",
        ("22.04.202410020",),
        _generation(_UBUNTU_2204, "V1"),
    ),
    MarketplaceImage(
        "Canonical",
        "UbuntuServer",
        "18.04-LTS",
        ("18.04.202306070",),
        ImageFacts("Linux", "V1", "ubuntu", "18.04", 30),
    ),
    MarketplaceImage(
        "Canonical",
        "UbuntuServer",
        "16.04-LTS",
        ("16.04.202109280",),
        ImageFacts("Linux", "V1", "ubuntu", "16.04", 30),
    ),
    MarketplaceImage(
        "MicrosoftWindowsServer", "WindowsServer", "2016-Datacenter", ("14393.7515.241016",), _WINDOWS_2016
    ),
    MarketplaceImage(
        "MicrosoftWindowsServer",
        "WindowsServer",
        "2016-datacenter-gensecond",
        ("14393.7515.241016",),
        _generation(_WINDOWS_2016, "V2"),
    ),
    MarketplaceImage(
        "MicrosoftWindowsServer", "WindowsServer", "2019-Datacenter", ("17763.6414.241004",), _WINDOWS_2019
    ),
    MarketplaceImage(
        "MicrosoftWindowsServer",
        "WindowsServer",
        "2019-datacenter-gensecond",
        ("17763.6414.241004",),
        _generation(_WINDOWS_2019, "V2"),
    ),
    MarketplaceImage(
        "MicrosoftWindowsServer",
        "WindowsServer",
        "2022-datacenter-azure-edition",
        ("20348.2762.241006",),
        _WINDOWS_2022,
    ),
)

_GALLERY_VERSION = re.compile(
    r"^(?P<definition>.*/images/[^/]+)(?:/versions/(?P<version>[^/]+))?$", re.IGNORECASE
)


def _version_order(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def _latest(versions: tuple[str, ...]) -> str:
    return max(versions, key=_version_order)


class ImageCatalog:
    """Marketplace images and gallery image definitions (see the module docstring)."""

    def __init__(self) -> None:
        self._marketplace: dict[tuple[str, str, str], MarketplaceImage] = {}
        self._galleries: dict[str, tuple[ImageFacts, tuple[str, ...]]] = {}
        for image in MARKETPLACE_IMAGES:
            self.add_marketplace_image(image)

    def add_marketplace_image(self, image: MarketplaceImage) -> None:
        """Publish ``image`` (its versions join those already known for the same SKU)."""
        known = self._marketplace.get(image.key)
        versions = tuple(dict.fromkeys((*(known.versions if known else ()), *image.versions)))
        self._marketplace[image.key] = MarketplaceImage(
            image.publisher, image.offer, image.sku, versions, image.facts
        )

    def add_gallery_image(self, definition_id: str, facts: ImageFacts, versions: tuple[str, ...]) -> None:
        """A gallery image definition (``.../galleries/G/images/I``, or a community or shared
        gallery's) with its versions."""
        key = definition_id.lower().rstrip("/")
        _, known = self._galleries.get(key, (facts, ()))
        self._galleries[key] = (facts, tuple(dict.fromkeys((*known, *versions))))

    def knows_gallery_of(self, image_id: str) -> bool:
        """Whether the gallery ``image_id`` lies in holds any catalogued image definition."""
        gallery = image_id.lower().split("/images/", 1)[0]
        return any(definition.split("/images/", 1)[0] == gallery for definition in self._galleries)

    def marketplace(self, publisher: str, offer: str, sku: str) -> MarketplaceImage | None:
        return self._marketplace.get((publisher.lower(), offer.lower(), sku.lower()))

    def resolve(self, reference: Any) -> ResolvedImage | None:
        """The catalogued image an ``imageReference`` names, or None (unknown image or version)."""
        if not isinstance(reference, dict):
            return None
        image_id = reference.get("id") or reference.get("communityGalleryImageId")
        image_id = image_id or reference.get("sharedGalleryImageId")
        if image_id:
            return self._resolve_gallery(str(image_id))
        image = self.marketplace(
            str(reference.get("publisher", "")),
            str(reference.get("offer", "")),
            str(reference.get("sku", "")),
        )
        if image is None:
            return None
        version = str(reference.get("version") or "latest")
        if version.lower() == "latest":
            return ResolvedImage(image.facts, _latest(image.versions))
        return ResolvedImage(image.facts, version) if version in image.versions else None

    def _resolve_gallery(self, image_id: str) -> ResolvedImage | None:
        match = _GALLERY_VERSION.match(image_id.rstrip("/"))
        if match is None:
            return None
        known = self._galleries.get(match.group("definition").lower())
        if known is None:
            return None
        facts, versions = known
        version = match.group("version")
        if version is None or version.lower() == "latest":
            return ResolvedImage(facts, _latest(versions)) if versions else None
        return ResolvedImage(facts, version) if version in versions else None

    def facts(self, reference: Any) -> ImageFacts:
        """What a machine built from ``reference`` inherits; an uncatalogued image is taken for a
        Linux Generation 2 image (:data:`UNCATALOGUED`)."""
        resolved = self.resolve(reference)
        return resolved.facts if resolved is not None else UNCATALOGUED
