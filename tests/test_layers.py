"""The package's layers, checked on the source: each layer imports only the layers below it, so the
privacy core stays usable on its own and no library code depends on the command line.

From the bottom: ``privacy`` (the mechanisms; numpy only), ``store`` (HDF5 cohorts and priors),
``beacon`` (queries, the answer engine, the ledger, the operator use cases), ``api`` (the Flask app),
``server`` (gunicorn), and beside them ``attack`` and ``experiments`` (evaluations); ``cli`` sits on
top of all of them and nothing imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mbeacon"

#: The modules of ours each layer may import, besides itself; ``mbeacon`` is the package's top-level
#: (``__version__``, the shipped ``data``); ``process``, ``pydantic_errors`` and ``data`` are leaves.
ALLOWED: dict[str, set[str]] = {
    "privacy": set(),
    "process": set(),
    "pydantic_errors": set(),
    "data": set(),
    "store": {"mbeacon", "process"},
    "beacon": {"mbeacon", "process", "pydantic_errors", "privacy", "store"},
    "api": {"mbeacon", "process", "pydantic_errors", "privacy", "store", "beacon"},
    "server": {"mbeacon", "process", "store", "beacon", "api"},
    "attack": {"mbeacon", "process", "pydantic_errors", "privacy", "store", "beacon"},
    "experiments": {"mbeacon", "privacy"},
}
#: Third-party packages a layer must not import (the privacy core runs without a web or HDF5 stack).
FORBIDDEN_EXTERNAL: dict[str, set[str]] = {
    "privacy": {"flask", "werkzeug", "gunicorn", "h5py", "pandas"},
    "store": {"flask", "werkzeug", "gunicorn"},
    "beacon": {"flask", "werkzeug", "gunicorn"},
}


def _layer(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return "mbeacon" if parts == ("__init__",) else parts[0]


def _imports(path: Path) -> set[str]:
    """The top-level names of everything ``path`` imports, ours as ``mbeacon.<layer>`` (lazy imports
    inside functions included: they are dependencies all the same)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "mbeacon":
                names += [f"mbeacon.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            found.add(".".join(parts[:2]) if parts[0] == "mbeacon" else parts[0])
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_imports_only_the_layers_below_it(path: Path) -> None:
    layer = _layer(path)
    if layer in ("cli", "mbeacon"):
        return  # the command line may use everything; the package's __init__ imports nothing of ours
    assert layer in ALLOWED, f"{layer}: a new layer must be placed in tests/test_layers.py's ALLOWED"
    ours = {name.split(".")[1] for name in _imports(path) if name.startswith("mbeacon.")}
    ours = {"mbeacon" if name in ("__version__", "data") else name for name in ours}
    wrong = sorted(ours - ALLOWED[layer] - {layer})
    assert not wrong, f"{path.relative_to(PACKAGE)} ({layer}) imports {wrong}"
    external = _imports(path) & FORBIDDEN_EXTERNAL.get(layer, set())
    assert not external, f"{path.relative_to(PACKAGE)} ({layer}) imports {sorted(external)}"


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """The check reads lazy and from-imports alike (so a violation cannot hide inside a function)."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from mbeacon.api import create_app\n    import flask\n")
    assert {"mbeacon.api", "flask"} <= _imports(source)
