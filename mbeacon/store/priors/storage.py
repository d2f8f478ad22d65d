"""Storing priors: ``STORE/priors/<name>/v<k>.h5``, named and versioned, saved, loaded and listed.

Each version has a checksum beside it (``v<k>.sha256``, SHA-256 of the file), checked before the HDF5
library opens the file: a damaged file is refused with :class:`DataError` instead of being parsed, and
parsing damaged HDF5 is not safe (fuzzing found byte flips on which the library's open never returns).
A version saved before checksums existed has none and is read unchecked.

A version is never overwritten: :func:`save_prior` picks ``k = 1 + latest`` under an exclusive file lock
(two writers never pick the same version) and publishes the file atomically
(:mod:`mbeacon.store.atomic`), so a failure leaves no new version behind. :func:`list_priors` reads only
the files' headers (after their checksums); :func:`prior_names` opens no file.

A dataset whose configuration names no prior is served with the store's only prior. So that adding a
second prior never makes that choice ambiguous (a reload would then have no prior for it), the first
prior is recorded as the store's default (``STORE/priors/DEFAULT``) when a second one is saved, and
:func:`choose_prior` keeps choosing it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import numpy as np

from mbeacon.store.atomic import publish
from mbeacon.store.errors import DataError
from mbeacon.store.priors.model import Prior
from mbeacon.store.priors.names import _NAME, check_name
from mbeacon.store.probe_ids import representatives, suffix_mask

__all__ = [
    "FILE_FORMAT",
    "FILE_FORMAT_VERSION",
    "PRIORS_DIR",
    "NoPriorChosen",
    "PriorChoice",
    "choose_prior",
    "list_priors",
    "load_prior",
    "prior_names",
    "recorded_default",
    "remove_prior",
    "save_prior",
]

PRIORS_DIR = "priors"
#: The store's recorded default prior (a name), written when a second prior joins the only one.
DEFAULT_FILE = "DEFAULT"
FILE_FORMAT = "mbeacon-prior"
FILE_FORMAT_VERSION = 1
_VERSION_FILE = re.compile(r"^v([1-9][0-9]*)\.h5$")


def _prior_dir(store_dir: Any, name: str) -> Path:
    check_name(name)
    return Path(store_dir) / PRIORS_DIR / name


def _versions(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    found = (_VERSION_FILE.match(entry.name) for entry in directory.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive advisory lock on the prior's directory: two writers never pick the same version."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _checksum_path(path: Path) -> Path:
    return path.with_suffix(".sha256")


def _verify(path: Path) -> None:
    """Refuse a prior file whose bytes differ from the checksum saved with it (DataError)."""
    stored = _checksum_path(path)
    if not stored.exists():
        return  # saved before checksums existed
    try:
        expected = stored.read_text(encoding="ascii").strip()
        actual = _sha256(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read prior file or its checksum: {exc}", path=str(path)) from None
    if actual != expected:
        raise DataError(
            f"prior file is damaged: its SHA-256 differs from {stored.name}; restore it from a backup",
            path=str(path),
        )


def _write_h5(path: Path, prior: Prior, version: int) -> None:
    with h5py.File(path, "w") as h5:
        h5.attrs.update(
            {
                "format": FILE_FORMAT,
                "format_version": FILE_FORMAT_VERSION,
                "name": prior.name,
                "version": version,
                "n_reference": int(prior.n_reference),
                "source": prior.source,
                "created": prior.created,
            }
        )
        ids = prior.probe_ids
        width = max(1, int(np.char.str_len(ids).max())) if ids.size else 1
        try:
            encoded = ids.astype(f"S{width}")
        except UnicodeEncodeError:
            raise DataError("probe ids must be ASCII") from None
        h5.create_dataset("probe_ids", data=encoded)
        for field in ("mean", "sd", "a", "b"):
            h5.create_dataset(field, data=getattr(prior, field))
        if prior.quantiles is not None:
            h5.create_dataset("quantiles", data=prior.quantiles)


def save_prior(store_dir: Any, prior: Prior) -> Prior:
    """Save ``prior`` as the next version of its name; returns it with ``version`` set.

    Writes ``STORE/priors/<name>/v<k>.h5``, ``k`` = 1 + the latest existing version (never reusing or
    overwriting one, even with concurrent writers: the choice is made under a file lock). The file is
    written in ``STORE/.staging`` and renamed into place only once complete: a failure at any point
    leaves no new version behind.
    """
    directory = _prior_dir(store_dir, prior.name)
    _record_default_before(store_dir, prior.name)
    with _locked(directory):
        existing = _versions(directory)
        version = (existing[-1] if existing else 0) + 1
        destination = directory / f"v{version}.h5"
        with publish(Path(store_dir), destination) as temp:
            _write_h5(temp, prior, version)
            # the checksum goes first: a version is listed by its .h5 file, which then always has one
            with publish(Path(store_dir), _checksum_path(destination)) as checksum:
                checksum.write_text(_sha256(temp) + "\n", encoding="ascii")
    return dataclasses.replace(prior, version=version)


def load_prior(store_dir: Any, name: str, version: int | None = None) -> Prior:
    """Load a stored prior (the latest version when ``version`` is None). Unknown name or version:
    :class:`DataError` listing what exists."""
    directory = _prior_dir(store_dir, name)
    versions = _versions(directory)
    if not versions:
        known = prior_names(store_dir)
        hint = f"; known: {', '.join(sorted(set(known)))}" if known else "; the store has no priors"
        raise DataError(f"no prior named {name!r}{hint}")
    if version is None:
        version = versions[-1]
    elif version not in versions:
        raise DataError(f"prior {name!r} has no version {version}; versions: {', '.join(map(str, versions))}")
    path = directory / f"v{version}.h5"
    _verify(path)
    try:
        with h5py.File(path, "r") as h5:
            attrs = dict(h5.attrs)
            if attrs.get("format") != FILE_FORMAT:
                raise DataError("not an mbeacon prior file", path=str(path))
            ids = h5["probe_ids"][()].astype(str)
            fields = {f: h5[f][()] for f in ("mean", "sd", "a", "b")}
            quant = h5["quantiles"][()] if "quantiles" in h5 else None
    except (OSError, KeyError) as exc:
        raise DataError(f"cannot read prior file: {exc}", path=str(path)) from None
    if suffix_mask(ids).any():  # a file of EPIC v2 ids, not yet keyed by CpG: key it as the builders do
        ids, rows = representatives(ids, presorted=True)  # saved sorted
        fields = {f: values[rows] for f, values in fields.items()}
        quant = None if quant is None else quant[rows]
    return Prior(
        name=str(attrs["name"]),
        version=version,
        probe_ids=ids,
        quantiles=quant,
        n_reference=int(attrs["n_reference"]),
        source=str(attrs["source"]),
        created=str(attrs["created"]),
        **fields,
    )


def remove_prior(store_dir: Any, name: str, version: int | None = None) -> list[int]:
    """Remove a stored prior (every version when ``version`` is None), returning the versions removed.
    Each file leaves its directory in one rename (:func:`mbeacon.store.atomic.remove`), the version's
    file before its checksum, so a reader sees a version whole or not at all. Unknown name or version:
    :class:`DataError` listing what exists. Whether anything still uses it is the caller's question."""
    from mbeacon.store import atomic

    directory = _prior_dir(store_dir, name)
    versions = _versions(directory)
    if not versions:
        known = prior_names(store_dir)
        raise DataError(f"no prior named {name!r}" + (f"; known: {', '.join(known)}" if known else ""))
    if version is not None and version not in versions:
        raise DataError(f"prior {name!r} has no version {version}; versions: {', '.join(map(str, versions))}")
    doomed = versions if version is None else [version]
    with _locked(directory):
        for k in doomed:
            path = directory / f"v{k}.h5"
            atomic.remove(Path(store_dir), path)
            if _checksum_path(path).exists():
                atomic.remove(Path(store_dir), _checksum_path(path))
        if not _versions(directory):
            (directory / ".lock").unlink(missing_ok=True)
    if not _versions(directory):
        with contextlib.suppress(OSError):  # a file of someone else's left in it: keep the folder
            directory.rmdir()
        if recorded_default(store_dir) == name:  # a default that is gone chooses nothing
            (Path(store_dir) / PRIORS_DIR / DEFAULT_FILE).unlink(missing_ok=True)
    return doomed


def prior_names(store_dir: Any) -> list[str]:
    """The names of the stored priors that have a version, sorted; from the folders, opening no file
    (the service resolves a dataset's prior by name at every request)."""
    root = Path(store_dir) / PRIORS_DIR
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and _NAME.match(p.name) and _versions(p))


def recorded_default(store_dir: Any) -> str | None:
    """The store's recorded default prior (see the module docstring), or None."""
    try:
        name = (Path(store_dir) / PRIORS_DIR / DEFAULT_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if _NAME.match(name) else None


def _record_default_before(store_dir: Any, adding: str) -> None:
    """Record the store's only prior as its default before a prior of another name is added, so the
    datasets served with it keep it."""
    names = prior_names(store_dir)
    if len(names) == 1 and names[0] != adding and recorded_default(store_dir) is None:
        with publish(Path(store_dir), Path(store_dir) / PRIORS_DIR / DEFAULT_FILE) as temp:
            temp.write_text(names[0] + "\n", encoding="ascii")


class PriorChoice(NamedTuple):
    """A prior's name and what chose it (shown to operators so they know which prior was used)."""

    name: str
    chosen_by: str


class NoPriorChosen(DataError):
    """No prior was named and the store does not hold exactly one; ``names`` are the ones it holds."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


def choose_prior(store_dir: Any, named: str | None = None, *, named_by: str = "config") -> PriorChoice:
    """The prior to use: ``named`` when given (``named_by`` says who named it), else the store's
    recorded default, else its only prior. The service and the budget advisor both choose this way, so
    that the advisor models the prior the beacon answers with. :class:`NoPriorChosen` says how many
    priors the store holds."""
    if named:
        return PriorChoice(named, named_by)
    names = prior_names(store_dir)
    default = recorded_default(store_dir)
    if default in names:
        return PriorChoice(default, f"the store's default prior ({PRIORS_DIR}/{DEFAULT_FILE})")
    if len(names) == 1:
        return PriorChoice(names[0], "only prior in the store")
    if not names:
        raise NoPriorChosen(
            f"store {store_dir} has no priors: build or import one first (mbeacon prior --help)", names
        )
    raise NoPriorChosen(
        f"store {store_dir} has {len(names)} priors ({', '.join(names)}) and none is named", names
    )


def list_priors(store_dir: Any) -> list[dict[str, Any]]:
    """Every stored version of every prior, by name then version: dicts with ``name``, ``version``,
    ``latest``, ``probes``, ``n_reference``, ``sketch`` (quantile levels, 0 for none), ``source``,
    ``created``, ``path``. Reads the files' headers only, after checking their checksums."""
    root = Path(store_dir) / PRIORS_DIR
    if not root.is_dir():
        return []
    out = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)):
        versions = _versions(directory)
        for version in versions:
            path = directory / f"v{version}.h5"
            _verify(path)
            try:
                with h5py.File(path, "r") as h5:
                    attrs = dict(h5.attrs)
                    probes = int(h5["probe_ids"].shape[0])
                    sketch = int(h5["quantiles"].shape[1]) if "quantiles" in h5 else 0
            except (OSError, KeyError) as exc:
                raise DataError(f"cannot read prior file: {exc}", path=str(path)) from None
            out.append(
                {
                    "name": directory.name,
                    "version": version,
                    "latest": version == versions[-1],
                    "probes": probes,
                    "n_reference": int(attrs.get("n_reference", 0)),
                    "sketch": sketch,
                    "source": str(attrs.get("source", "")),
                    "created": str(attrs.get("created", "")),
                    "path": str(path),
                }
            )
    return out
