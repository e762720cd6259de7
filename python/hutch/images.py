"""``hutch.images``: the image store from Python (docs/images.md).

Each function runs one ``hutch image VERB --json`` and returns its typed
result, or raises the exception of the envelope's error kind
(``RegistryError`` for a registry that could not be reached, refused the
credentials or sent content that does not match its digest; ``Refused``
for an image a check or the approved list refuses; ``NotFound``;
``HostIOError``)::

    from hutch import images

    img = images.pull("registry.example/ci/python@sha256:...",
                      approved=["registry.example/ci/python@sha256:..."])
    hutch.run(["python3", "-V"], image=img.pin, workspace="/srv/repo")

Credentials come from a docker-style credential file
(``registry_auth=``, else ``$REGISTRY_AUTH_FILE``,
``$XDG_RUNTIME_DIR/containers/auth.json``, ``~/.docker/config.json``),
never from arguments.
"""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Union

from . import _binary
from ._core import no_report
from ._errors import from_document

PathLike = Union[str, "os.PathLike[str]"]
#: An approved list: a file of entries, or the entries themselves
#: (``sha256:<64 hex>`` or ``REPOSITORY@sha256:<64 hex>``).
Approved = Union[PathLike, Sequence[str]]


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    variant: str | None = None

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    @classmethod
    def from_dict(cls, d: Any) -> Platform:
        return cls(str(d.get("os", "")), str(d.get("architecture", "")), d.get("variant"))


@dataclass(frozen=True)
class Pulled:
    """Where a pulled image came from."""

    repository: str
    reference: str
    #: The index digest a multi-platform image was chosen from.
    index: str | None = None


@dataclass(frozen=True)
class Image:
    """One image of the store."""

    manifest: str
    config: str
    platform: Platform
    names: tuple[str, ...]
    layers: tuple[str, ...]
    size: int
    format: str
    imported: int
    pulled: Pulled | None = None

    @property
    def pin(self) -> str:
        """A reference that pins this image for a run (``NAME@sha256:...``)."""
        return f"{self.names[0]}@{self.manifest}" if self.names else self.manifest

    @classmethod
    def from_dict(cls, d: Any) -> Image:
        p = d.get("pulled")
        return cls(
            manifest=str(d["manifest"]),
            config=str(d["config"]),
            platform=Platform.from_dict(d.get("platform", {})),
            names=tuple(str(n) for n in d.get("names", [])),
            layers=tuple(str(n) for n in d.get("layers", [])),
            size=int(d.get("size", 0)),
            format=str(d.get("format", "")),
            imported=int(d.get("imported", 0)),
            pulled=None
            if p is None
            else Pulled(str(p["repository"]), str(p["reference"]), p.get("index")),
        )


@dataclass(frozen=True)
class Verdict:
    """One check's verdict: ``outcome`` is ``pass``, ``overridden``,
    ``refused`` or ``note``."""

    check: str
    outcome: str
    detail: str
    override_flag: str | None = None

    @classmethod
    def from_dict(cls, d: Any) -> Verdict:
        return cls(str(d["check"]), str(d["outcome"]), str(d["detail"]), d.get("override_flag"))


def _verdicts(d: Any) -> tuple[Verdict, ...]:
    return tuple(Verdict.from_dict(v) for v in d.get("verdicts", []))


@dataclass(frozen=True)
class PullResult:
    image: Image
    #: What the reference resolved to at the registry (an index's digest
    #: for a multi-platform image): the pin to use next time.
    digest: str
    #: False for a tag pulled with ``allow_unpinned=True``.
    pinned: bool
    new_layers: int
    downloaded: int
    reused: int
    verdicts: tuple[Verdict, ...]


@dataclass(frozen=True)
class ImportResult:
    image: Image
    new_layers: int
    verdicts: tuple[Verdict, ...]


@dataclass(frozen=True)
class Inspection:
    image: Image
    #: The image config's run defaults (``Env``, ``Cmd``, ``User``, ...).
    config: dict[str, Any]
    layers: tuple[dict[str, Any], ...]
    verdicts: tuple[Verdict, ...]

    @property
    def approved(self) -> bool | None:
        """Whether the approved list given to ``inspect`` lists the image
        (None: no list given)."""
        for v in self.verdicts:
            if v.check == "approved":
                return v.outcome == "pass"
        return None


@dataclass(frozen=True)
class Removed:
    manifest: str
    names: tuple[str, ...]
    image_removed: bool


@dataclass(frozen=True)
class GcResult:
    layers: tuple[str, ...]
    blobs: tuple[str, ...]
    staging: int
    stale_refs: int


def _call(verb: str, args: Sequence[str], store: PathLike | None) -> Any:
    argv = [_binary.binary(), "image"]
    if store is not None:
        argv += ["--image-store", os.fspath(store)]
    argv += [verb, *args, "--json"]
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise no_report(f"image.{verb}", p.returncode, p.stderr) from None
    if not isinstance(doc, dict) or "ok" not in doc:
        raise no_report(f"image.{verb}", p.returncode, p.stderr)
    if not doc["ok"]:
        raise from_document(doc.get("error"), str(doc.get("verb", verb)), p.returncode)
    return doc.get("result")


def _import_caps(
    max_image_size: int | str | None,
    max_expansion: int | None,
    allow_platform_mismatch: bool,
    allow_volumes: bool,
    allow_secret_env: bool,
    allow_devices: bool,
) -> builtins.list[str]:
    """The caps and check overrides ``import_`` and ``pull`` share."""
    a: builtins.list[str] = []
    if max_image_size is not None:
        if isinstance(max_image_size, bool):
            raise ValueError("max_image_size: bytes or a size like '16G'")
        a += ["--max-image-size", str(max_image_size)]
    if max_expansion is not None:
        a += ["--max-expansion", str(int(max_expansion))]
    for on, flag in (
        (allow_platform_mismatch, "--allow-platform-mismatch"),
        (allow_volumes, "--allow-volumes"),
        (allow_secret_env, "--allow-secret-env"),
        (allow_devices, "--allow-devices"),
    ):
        if on:
            a.append(flag)
    return a


@contextmanager
def _approved_file(approved: Approved | None) -> Iterator[builtins.list[str]]:
    """``--approved FILE`` for a path, or for entries a private temporary file."""
    if approved is None:
        yield []
    elif isinstance(approved, (str, os.PathLike)):
        yield ["--approved", os.fspath(approved)]
    else:
        with tempfile.NamedTemporaryFile("w", prefix="hutch-approved-", suffix=".list") as f:
            for entry in approved:
                if "\n" in entry or "#" in entry:
                    raise ValueError(f"approved entry {entry!r}: one digest reference, no newline")
                f.write(entry + "\n")
            f.flush()
            yield ["--approved", f.name]


def pull(
    reference: str,
    *,
    store: PathLike | None = None,
    platform: str | None = None,
    registry_auth: PathLike | None = None,
    registry_credential: str | None = None,
    insecure_registries: Sequence[str] = (),
    approved: Approved | None = None,
    allow_unpinned: bool = False,
    name: str | None = None,
    max_image_size: int | str | None = None,
    max_expansion: int | None = None,
    allow_platform_mismatch: bool = False,
    allow_volumes: bool = False,
    allow_secret_env: bool = False,
    allow_devices: bool = False,
    profile: PathLike | None = None,
) -> PullResult:
    """``hutch image pull``: fetch ``HOST[:PORT]/REPOSITORY@sha256:...`` by
    digest, verify every blob, and import it. ``insecure_registries``
    (``HOST[:PORT]``) are reached over plain http; ``registry_credential``
    (``"[user=USER,]from-env=VAR"`` or ``from-file=PATH``) is the
    registry's password or token, read by hutch from that source (never
    argv, never printed); ``approved`` refuses an
    unlisted image before any layer is fetched; ``profile`` is a TOML or
    JSON profile whose ``registry_credentials`` name the registry's
    credential source (``registry_auth`` and ``registry_credential`` win).
    The caps and ``allow_*`` overrides are ``import_``'s."""
    a = [reference]
    a += _import_caps(
        max_image_size,
        max_expansion,
        allow_platform_mismatch,
        allow_volumes,
        allow_secret_env,
        allow_devices,
    )
    if platform is not None:
        a += ["--platform", platform]
    if registry_auth is not None:
        a += ["--registry-auth", os.fspath(registry_auth)]
    if registry_credential is not None:
        a += ["--registry-credential", registry_credential]
    if profile is not None:
        a += ["--profile", os.fspath(profile)]
    for h in insecure_registries:
        a += ["--insecure-registry", h]
    if allow_unpinned:
        a.append("--allow-unpinned")
    if name is not None:
        a += ["--name", name]
    with _approved_file(approved) as extra:
        d = _call("pull", a + extra, store)
    return PullResult(
        image=Image.from_dict(d["image"]),
        digest=str(d["digest"]),
        pinned=bool(d["pinned"]),
        new_layers=int(d["new_layers"]),
        downloaded=int(d["downloaded"]),
        reused=int(d["reused"]),
        verdicts=_verdicts(d),
    )


def import_(
    source: PathLike,
    *,
    store: PathLike | None = None,
    name: str | None = None,
    platform: str | None = None,
    rootfs: bool = False,
    ref: str | None = None,
    max_image_size: int | str | None = None,
    max_expansion: int | None = None,
    allow_platform_mismatch: bool = False,
    allow_volumes: bool = False,
    allow_secret_env: bool = False,
    allow_devices: bool = False,
) -> ImportResult:
    """``hutch image import``: an OCI layout, a docker-archive, or with
    ``rootfs=True`` a root filesystem. ``ref`` picks the image of a
    multi-image archive; ``max_image_size`` (default 16G) and
    ``max_expansion`` (default 100) bound what it unpacks to;
    ``allow_*`` accept what that check refuses (docs/images.md)."""
    a = [os.fspath(source)]
    if ref is not None:
        a += ["--ref", ref]
    a += _import_caps(
        max_image_size,
        max_expansion,
        allow_platform_mismatch,
        allow_volumes,
        allow_secret_env,
        allow_devices,
    )
    if name is not None:
        a += ["--name", name]
    if platform is not None:
        a += ["--platform", platform]
    if rootfs:
        a.append("--rootfs")
    d = _call("import", a, store)
    return ImportResult(Image.from_dict(d["image"]), int(d["new_layers"]), _verdicts(d))


def list(*, store: PathLike | None = None) -> builtins.list[Image]:
    """``hutch image list``: every image of the store."""
    return [Image.from_dict(i) for i in _call("list", [], store)]


def inspect(
    reference: str,
    *,
    store: PathLike | None = None,
    platform: str | None = None,
    approved: Approved | None = None,
) -> Inspection:
    """``hutch image inspect``: config, layers and each check's verdict;
    with ``approved`` also whether the list approves the image."""
    a = [reference]
    if platform is not None:
        a += ["--platform", platform]
    with _approved_file(approved) as extra:
        d = _call("inspect", a + extra, store)
    return Inspection(
        image=Image.from_dict(d["image"]),
        config=dict(d.get("config", {})),
        layers=tuple(dict(layer) for layer in d.get("layers", [])),
        verdicts=_verdicts(d),
    )


def rm(reference: str, *, store: PathLike | None = None) -> Removed:
    """``hutch image rm``: a name (the image goes with its last), or by
    digest the image."""
    d = _call("rm", [reference], store)
    return Removed(str(d["manifest"]), tuple(d.get("names", [])), bool(d["image_removed"]))


def gc(*, store: PathLike | None = None) -> GcResult:
    """``hutch image gc``: remove what no image references."""
    d = _call("gc", [], store)
    return GcResult(
        tuple(d.get("layers", [])),
        tuple(d.get("blobs", [])),
        int(d.get("staging", 0)),
        int(d.get("stale_refs", 0)),
    )
