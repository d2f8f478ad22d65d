"""Platform annotations in the store, and the links from datasets to their platform.

Layout::

    STORE/annotations/<platform>.h5   one sealed HDF5 file per platform (e.g. GPL13534.h5)
    STORE/annotations/links.json      {"dataset id": "platform"}: links made after ingest

A file holds the arrays of :class:`~mbeacon.store.annotation.index.ProbeAnnotation` (region order)
and attributes: platform, genome build, source file and format, counts, creation time and a SHA-256
checksum of the arrays. Files and the links are published atomically (:mod:`mbeacon.store.atomic`).

A dataset's platform is its link in ``links.json`` if it has one, else the platform recorded at
ingest (GEO's ``!Series_platform_id``, or ``--platform``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import h5py
import numpy as np

from mbeacon.store import atomic, sealed
from mbeacon.store.annotation.index import ProbeAnnotation
from mbeacon.store.errors import DataError

FORMAT_VERSION = 1
FOLDER = "annotations"
LINKS = "links.json"
_PLATFORM_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ARRAYS = ("probe_ids", "chromosome", "position", "island", "gene_names", "gene_offsets", "gene_members")


@dataclass(frozen=True)
class AnnotationInfo:
    """What the store says about one platform annotation."""

    platform: str
    build: str
    probes: int
    positioned: int
    genes: int
    source_file: str
    source_format: str
    created: str
    checksum: str

    def to_json(self) -> dict:
        return asdict(self)


def check_platform_id(platform: str) -> str:
    if not _PLATFORM_ID.match(platform or ""):
        raise DataError(
            f"invalid platform id {platform!r}: use 1-64 letters, digits, '.', '_' or '-' (e.g. GPL13534)"
        )
    return platform


class AnnotationStore:
    """The ``annotations/`` folder of a store directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.folder = self.root / FOLDER

    def path_of(self, platform: str) -> Path:
        return self.folder / f"{check_platform_id(platform)}.h5"

    def platforms(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.h5")) if self.folder.is_dir() else []

    def stamp(self) -> tuple[int, int]:
        """Changes with every import and link (each publishes by a rename into the folder)."""
        try:
            folder = os.stat(self.folder).st_mtime_ns
        except FileNotFoundError:
            return (0, 0)
        try:
            return (folder, os.stat(self.folder / LINKS).st_mtime_ns)
        except FileNotFoundError:
            return (folder, 0)

    def write(
        self, annotation: ProbeAnnotation, *, source_file: str, source_format: str, replace: bool = False
    ) -> AnnotationInfo:
        dest = self.path_of(annotation.platform)
        if dest.exists() and not replace:
            raise DataError(
                f"platform {annotation.platform!r} already has an annotation in {self.root}: import with "
                "--replace to replace it atomically, or give another --platform"
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        for name in _ARRAYS:
            digest.update(np.ascontiguousarray(getattr(annotation, name)).tobytes())
        with atomic.publish(self.root, dest) as temp:
            with h5py.File(temp, "w", userblock_size=sealed.USERBLOCK) as f:
                for name in _ARRAYS:
                    data = getattr(annotation, name)
                    f.create_dataset(name, data=data, compression="gzip" if len(data) > 1024 else None)
                f.attrs.update(
                    {
                        "format_version": FORMAT_VERSION,
                        "platform": annotation.platform,
                        "build": annotation.build,
                        "probes": len(annotation.probe_ids),
                        "positioned": int(np.count_nonzero(annotation.position >= 0)),
                        "genes": len(annotation.gene_names),
                        "source_file": source_file,
                        "source_format": source_format,
                        "created": datetime.now(UTC).isoformat(timespec="seconds"),
                        "checksum": "sha256:" + digest.hexdigest(),
                    }
                )
            sealed.seal(temp)
        return self.info(annotation.platform)

    def info(self, platform: str) -> AnnotationInfo:
        path = self._existing(platform)
        with h5py.File(path, "r") as f:
            a = f.attrs
            return AnnotationInfo(
                *(_text(a[k]) for k in ("platform", "build")),
                *(int(a[k]) for k in ("probes", "positioned", "genes")),
                *(_text(a[k]) for k in ("source_file", "source_format", "created", "checksum")),
            )

    def list(self) -> list[AnnotationInfo]:
        return [self.info(p) for p in self.platforms()]

    def load(self, platform: str) -> ProbeAnnotation:
        path = self._existing(platform)
        with h5py.File(path, "r") as f:
            arrays = {name: f[name][...] for name in _ARRAYS}
            return ProbeAnnotation(_text(f.attrs["platform"]), _text(f.attrs["build"]), **arrays)

    def remove(self, platform: str) -> None:
        atomic.remove(self.root, self._existing(platform))

    def _existing(self, platform: str) -> Path:
        path = self.path_of(platform)
        if not path.exists():
            raise DataError(f"no annotation of platform {platform!r} in store {self.root}")
        sealed.verify(path)
        return path

    # --- links -------------------------------------------------------------------------------------

    def links(self) -> dict[str, str]:
        try:
            text = (self.folder / LINKS).read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            links = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(f"damaged links file: {error}", path=str(self.folder / LINKS)) from None
        return {str(k): str(v) for k, v in links.items()}

    def link(self, dataset: str, platform: str | None) -> None:
        """Link ``dataset`` to ``platform`` (None: drop its link), replacing the links file atomically."""
        links = self.links()
        if platform is None:
            links.pop(dataset, None)
        else:
            links[dataset] = check_platform_id(platform)
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic.publish(self.root, self.folder / LINKS) as temp:
            temp.write_text(json.dumps(dict(sorted(links.items())), indent=1) + "\n", encoding="utf-8")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
