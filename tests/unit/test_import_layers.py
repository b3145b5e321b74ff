"""The layer rules of the import graph (issue 25, item 2): import-linter's contracts in pyproject.toml
hold, and neither package has an import cycle. grimp (import-linter's graph library) reads imports inside
functions and under ``if TYPE_CHECKING:`` as well as at module level."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]

#: Cycles that remain, each named by its edges; the test fails on any other cycle, and on one of these
#: that no longer exists (so the entry is removed when the cycle is broken). See docs/decisions.md.
# none left: BatchRefusedError.items is typed by a Protocol of errors (RefusedItem), not by the records'
# BatchItem, so errors no longer imports records (whose ItemError looks the error classes up)
KNOWN_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset()


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("paymentcore", "paymentcore_server", cache_dir=None)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    lines = []
    for importer in component:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & set(component)):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                where = f"l.{detail['line_number']}: {detail['line_contents']}"
                lines.append(f"  {importer} -> {imported} ({where})")
    return "\n".join(lines)


def test_the_import_linter_contracts_hold() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout and "4 kept" in done.stdout, done.stdout


def test_the_server_contract_names_every_private_module_and_folder_of_the_library() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (server,) = [c for c in contracts if c.get("source_modules") == ["paymentcore_server"]]
    private = {f"paymentcore.{path.stem}" for path in (ROOT / "paymentcore").glob("_*.py")}
    private |= {f"paymentcore.{path.parent.name}" for path in (ROOT / "paymentcore").glob("_*/__init__.py")}
    private.discard("paymentcore.__init__")
    assert set(server["forbidden_modules"]) == private


def test_every_module_of_the_library_sits_on_a_floor_or_is_public() -> None:
    """The top of the package holds the public modules (and the client's and testing kit's private
    halves); everything else lives in a floor folder that the layers contract names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    named = {name.strip() for layer in layers["layers"] for name in layer.replace("|", ":").split(":")}
    folders = {f"paymentcore.{path.parent.name}" for path in (ROOT / "paymentcore").glob("*/__init__.py")}
    assert folders - {"paymentcore.data"} <= named
    top_private = sorted(path.stem for path in (ROOT / "paymentcore").glob("_*.py"))
    assert top_private == ["__init__", "_kit_http", "_remote"]


def test_the_packages_have_no_import_cycle() -> None:
    graph = _graph()
    edges = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    for importer, imported in KNOWN_CYCLE_EDGES:
        assert imported in edges[importer], f"{importer} -> {imported} is gone: drop it from the known edges"
        edges[importer].discard(imported)
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n" + "\n\n".join(_describe(graph, c) for c in cycles)


def test_the_cycle_finder_names_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
