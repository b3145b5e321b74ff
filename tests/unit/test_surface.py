"""The package's deliberate surface: public modules declare ``__all__``, the server uses only the public
API, and the library's modules import each other without cycles."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("paymentcore", "paymentcore_server")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def is_public(name: str) -> bool:
    return not any(part.startswith("_") and part != "__init__" for part in name.split("."))


PUBLIC = [module_name(p) for package in PACKAGES for p in modules(package) if is_public(module_name(p))]


@pytest.mark.parametrize("name", [n for n in PUBLIC if not n.endswith("__main__")])
def test_every_public_module_declares_what_it_exports(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    missing = [item for item in exported if not hasattr(module, item)]
    assert missing == [] and len(set(exported)) == len(exported)


def imported_modules(path: Path, *, top_level_only: bool) -> set[str]:
    """The modules ``path`` imports (resolved), at module level only when ``top_level_only``."""
    tree = ast.parse(path.read_text("utf-8"))
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            for alias in node.names:  # "from paymentcore import _ledger" names a module
                candidate = f"{base}.{alias.name}"
                if (ROOT / Path(*candidate.split("."))).with_suffix(".py").exists():
                    found.add(candidate)
    return found


def test_the_server_imports_only_the_public_api_of_the_library() -> None:
    private = {
        module_name(path): sorted(
            name
            for name in imported_modules(path, top_level_only=False)
            if name.startswith("paymentcore.") and not is_public(name)
        )
        for path in modules("paymentcore_server")
    }
    assert {name: used for name, used in private.items() if used} == {}


def test_the_library_has_no_import_cycles() -> None:
    graph = {
        module_name(path): {
            name
            for name in imported_modules(path, top_level_only=True)
            if name.startswith("paymentcore.") and name != module_name(path)
        }
        for path in modules("paymentcore")
    }
    graph = {name: {dep for dep in deps if dep in graph} for name, deps in graph.items()}
    cycles: list[list[str]] = []

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append([*trail[trail.index(name) :], name])
            return
        for dep in sorted(graph[name]):
            visit(dep, [*trail, name])

    for start in sorted(graph):
        if start != "paymentcore":  # the package re-exports everything; its modules never import it
            visit(start, [])
    assert cycles == []


def test_importing_the_library_loads_no_web_framework_http_client_driver_or_metrics_library() -> None:
    code = (
        "import sys, paymentcore; "
        "print(sorted(m for m in ('starlette', 'uvicorn', 'httpx', 'sqlite_utils', 'cattrs', "
        "'prometheus_client') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() in ("[]", "['cattrs']")
