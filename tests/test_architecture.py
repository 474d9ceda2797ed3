"""The layers of ARCHITECTURE.md hold: no upward import, no cycle, no private import, small modules.

Read from the source with :mod:`ast` (nothing is imported), so a violation is
reported with its file and line:

- **Layers.** Every module of ``specsim`` belongs to a layer (the table in
  ``docs/design.md``'s Layers section, lowest first, as drawn in ARCHITECTURE.md) and imports
  only from its own layer
  or below. ``specsim.sampling`` and ``specsim.theory`` import nothing else from
  the package (they are the ground truth the rest is checked against); nothing
  but ``specsim.cli`` imports ``specsim.measure``.
- **Folders of sim.** ``specsim.sim`` shows its layers as folders (the rows of that
  table with a sim layer: costs and workload, results, stream, serving, config,
  disagg); a module in one imports only from its own folder or one below it, never
  from ``sim/``'s own modules, and at most :data:`MAX_FLAT_SIM_MODULES` modules sit in
  ``sim/`` beside the folders.
- **Optional extras and plotting.** torch, transformers, tokenizers,
  safetensors, dask, distributed, pyarrow and pynvml are never imported at
  module level outside ``specsim.measure`` (dask and pyarrow nowhere at module
  level); matplotlib and seaborn only in the row that draws (plots, the study
  runner, the report).
- **No hidden edges.** An import inside a function or method is allowed only for
  an optional extra (above, or ``specsim.measure``) or as a deliberate start-up
  saving, marked by a comment containing ``start-up:`` on the import's line or
  the line above it.
- **No cycle** among specsim modules, counting every import (module level, inside
  functions, and inside ``if TYPE_CHECKING:`` blocks: a type-only import does not run,
  but two modules that name each other's types are one thing split in two, so what
  they share belongs in a module of its own). Importing ``a.b.c`` from outside ``a.b``
  also runs ``a.b/__init__``, so that edge counts.
- **Private stays private.** A name with a leading underscore is private to where
  it is defined: no module imports a private name (``from m import _x``) or reads
  one off an imported module (``m._x``) from another module. A private module
  ``pkg._m`` may be imported by the modules of its own package ``pkg`` (its
  siblings and ``pkg/__init__``) and by no one else; a private module directly
  under ``specsim/`` has the whole library as its package, which would make
  "private" mean nothing, so it counts as private everywhere: such a module is
  either public (``specsim.rng``) or belongs inside the one package that uses it.
- **Size.** No module over :data:`MAX_LINES` lines, and no function (in any folder) over
  :data:`MAX_FUNCTION_LINES`, its docstring aside.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specsim"
MAX_LINES = 400
MAX_FUNCTION_LINES = 60  # a function fits on a screen, its docstring aside

DESIGN = ROOT / "docs" / "design.md"


def read_layers(path: Path = DESIGN) -> dict[str, int]:
    """The layer table of ``docs/design.md``'s "Layers" section: ``| `module` | layer | ... |``
    rows, lowest first. The rule lives there, documented, and only there."""
    text = path.read_text()
    section = text.split("\n## Layers\n", 1)
    if len(section) != 2:
        raise ValueError(f"{path}: no '## Layers' section")
    body = section[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(specsim[\w.]*)` \| (\d) \|", body, flags=re.M)
    if not rows:
        raise ValueError(f"{path}: the Layers section has no | `module` | layer | rows")
    return {module: int(n) for module, n in rows}


LAYERS: dict[str, int] = read_layers()


def read_sim_layers(path: Path = DESIGN) -> dict[str, int]:
    """The folders of ``specsim.sim`` and their order, lowest first: the rows of the Layers
    section with a third column, ``| `specsim.sim.folder` | layer | sim layer | ... |``."""
    body = path.read_text().split("\n## Layers\n", 1)[-1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(specsim\.sim\.\w+)` \| \d \| (\d) \|", body, flags=re.M)
    if not rows:
        raise ValueError(f"{path}: the Layers section has no | `specsim.sim.folder` | rows")
    return {module: int(n) for module, n in rows}


SIM = "specsim.sim"
SIM_LAYERS: dict[str, int] = read_sim_layers()
MAX_FLAT_SIM_MODULES = 8  # sim/ shows its layers as folders; only a few modules sit beside them
# Ground truth: these import nothing from specsim outside themselves.
SELF_CONTAINED = ("specsim.sampling", "specsim.theory")
OPTIONAL = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "dask",
    "distributed",
    "pyarrow",
    "pynvml",
)
PLOTTING = ("matplotlib", "seaborn")
# The row of ARCHITECTURE.md that draws: plots, the study runner, the report.
PLOTTING_LAYER = ("specsim.plots", "specsim.studies", "specsim.report")
MEASURE = "specsim.measure"
START_UP = "start-up:"


@dataclass(frozen=True)
class Edge:
    """One import statement's target as seen from a module."""

    source: str  # the importing module
    target: str  # an absolute module name (or a top-level third-party name)
    names: tuple[str, ...]  # names taken from the target (``from target import a, b``)
    line: int
    nested: bool  # inside a function or method
    type_only: bool  # inside ``if TYPE_CHECKING:``
    where: str  # path:line

    @property
    def external(self) -> bool:
        return self.target.split(".")[0] != "specsim"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(name: str) -> bool:
    return (ROOT / Path(*name.split(".")) / "__init__.py").is_file()


def _is_module(name: str) -> bool:
    return _is_package(name) or (ROOT / Path(*name.split("."))).with_suffix(".py").is_file()


def _files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


MODULES = {_module_name(p): p for p in _files()}


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of a ``from X import`` statement's X (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(
    node: ast.AST, *, nested: bool = False, type_only: bool = False
) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Every node with (inside a function, inside ``if TYPE_CHECKING:``)."""
    for child in ast.iter_child_nodes(node):
        yield child, nested, type_only
        inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for part in child.body:
                yield part, inner, True
                yield from _walk(part, nested=inner, type_only=True)
            for part in child.orelse:
                yield part, inner, type_only
                yield from _walk(part, nested=inner, type_only=type_only)
            continue
        yield from _walk(child, nested=inner, type_only=type_only)


@dataclass(frozen=True)
class Source:
    module: str
    path: Path
    tree: ast.Module
    lines: tuple[str, ...]

    def where(self, line: int) -> str:
        return f"{self.path.relative_to(ROOT)}:{line}"

    def marked(self, line: int) -> bool:
        """A ``start-up:`` comment on the import's line or the line above it."""
        return any(START_UP in self.lines[i - 1] for i in (line - 1, line) if i >= 1)


def _sources() -> list[Source]:
    out = []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        out.append(Source(name, path, ast.parse(text, str(path)), tuple(text.splitlines())))
    return out


SOURCES = _sources()


def _edges(src: Source) -> list[Edge]:
    edges = []
    for node, nested, type_only in _walk(src.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                edges.append(
                    Edge(
                        src.module,
                        alias.name,
                        (),
                        node.lineno,
                        nested,
                        type_only,
                        src.where(node.lineno),
                    )
                )
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(src.module, node)
            names = tuple(a.name for a in node.names)
            edges.append(
                Edge(
                    src.module,
                    target,
                    names,
                    node.lineno,
                    nested,
                    type_only,
                    src.where(node.lineno),
                )
            )
    return edges


EDGES = [e for src in SOURCES for e in _edges(src)]


def _targets(edge: Edge) -> list[str]:
    """The specsim modules an import runs: the target, submodules named in ``from``, and
    the packages above the target that the importer is not already inside."""
    if edge.external:
        return []
    mods = [f"{edge.target}.{n}" for n in edge.names if _is_module(f"{edge.target}.{n}")]
    if len(mods) < len(edge.names) or not edge.names:
        mods.append(edge.target)  # some name is an attribute of the target itself
    parts = edge.target.split(".")
    for i in range(2, len(parts)):
        pkg = ".".join(parts[:i])
        if not (edge.source == pkg or edge.source.startswith(pkg + ".")):
            mods.append(pkg)
    return [m for m in mods if m in MODULES and m != edge.source]


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _family(module: str) -> str:
    """The top-level part of specsim a module belongs to (``specsim.theory.numeric`` ->
    ``specsim.theory``)."""
    return ".".join(module.split(".")[:2])


# The checks --------------------------------------------------------------------------------
def test_every_module_has_a_layer() -> None:
    unknown = [m for m in MODULES if m != "specsim" and _family(m) not in LAYERS]
    assert not unknown, f"modules with no layer in docs/design.md's Layers table: {unknown}"


def upward_imports() -> list[str]:
    bad = []
    for e in EDGES:
        for target in _targets(e):
            if _family(target) == _family(e.source):
                continue
            if layer(target) > layer(e.source):
                bad.append(
                    f"{e.where}: {e.source} (layer {layer(e.source)}) imports {target} "
                    f"(layer {layer(target)})"
                )
            elif _family(e.source) in SELF_CONTAINED:
                bad.append(f"{e.where}: {e.source} is ground truth but imports {target}")
            elif _family(target) == MEASURE and _family(e.source) != "specsim.cli":
                bad.append(f"{e.where}: {e.source} imports the optional {target}")
    return bad


def test_no_upward_import() -> None:
    bad = upward_imports()
    assert not bad, "imports against the layers of ARCHITECTURE.md:\n" + "\n".join(bad)


def sim_folder(module: str) -> str | None:
    """The folder of ``specsim.sim`` that a module lies in (None: a module of ``sim/`` itself)."""
    parts = module.split(".")
    if module == SIM or not module.startswith(SIM + ".") or not _is_package(".".join(parts[:3])):
        return None
    return ".".join(parts[:3])


def sim_layer(module: str) -> int:
    """A sim module's place inside ``specsim.sim``: its folder's row, and a module of ``sim/``
    itself (the package's face, :mod:`specsim.sim` loading every folder's names) above them all."""
    folder = sim_folder(module)
    return SIM_LAYERS[folder] if folder is not None else max(SIM_LAYERS.values()) + 1


def sim_upward_imports(edges: list[Edge] | None = None) -> list[str]:
    """Imports from one folder of ``specsim.sim`` into a folder above it (or into ``sim/``'s own
    modules)."""
    bad = []
    for e in EDGES if edges is None else edges:
        if sim_folder(e.source) is None:
            continue
        for target in _targets(e):
            if target.startswith(SIM + ".") or target == SIM:
                if sim_layer(target) > sim_layer(e.source):
                    bad.append(
                        f"{e.where}: {e.source} (sim layer {sim_layer(e.source)}) imports "
                        f"{target} (sim layer {sim_layer(target)})"
                    )
    return bad


def test_every_folder_of_sim_has_a_place_and_few_modules_sit_beside_them() -> None:
    sim_dir = PACKAGE / "sim"
    folders = {f"{SIM}.{p.parent.name}" for p in sim_dir.glob("*/__init__.py")}
    assert folders == set(SIM_LAYERS), (
        f"folders of sim/ {sorted(folders)} and the sim rows of docs/design.md's Layers table "
        f"{sorted(SIM_LAYERS)} differ"
    )
    flat = sorted(p.name for p in sim_dir.glob("*.py"))
    assert len(flat) <= MAX_FLAT_SIM_MODULES, (
        f"{len(flat)} modules in sim/ beside its folders (at most {MAX_FLAT_SIM_MODULES}): {flat}"
    )


def test_no_upward_import_inside_sim() -> None:
    bad = sim_upward_imports()
    assert not bad, "imports against the folders of sim/ (docs/design.md):\n" + "\n".join(bad)


def extras_at_top_level() -> list[str]:
    bad = []
    for e in EDGES:
        top = e.target.split(".")[0]
        if e.nested or e.type_only or not e.external:
            continue
        if top in OPTIONAL and (_family(e.source) != MEASURE or top in ("dask", "pyarrow")):
            bad.append(f"{e.where}: {e.source} imports the optional {top} at module level")
        if top in PLOTTING and _family(e.source) not in PLOTTING_LAYER:
            bad.append(f"{e.where}: {e.source} imports {top} outside the plotting layer")
    return bad


def test_no_optional_extra_or_plotting_at_module_level_in_the_core() -> None:
    bad = extras_at_top_level()
    assert not bad, "\n".join(bad)


def hidden_imports() -> list[str]:
    by_module = {s.module: s for s in SOURCES}
    bad = []
    for e in EDGES:
        if not e.nested or e.type_only:
            continue
        top = e.target.split(".")[0]
        if top in OPTIONAL or _family(e.target) == MEASURE:
            continue
        if by_module[e.source].marked(e.line):
            continue
        bad.append(f"{e.where}: {e.source} imports {e.target} inside a function")
    return bad


def test_imports_inside_functions_are_extras_or_marked_start_up_savings() -> None:
    bad = hidden_imports()
    assert not bad, (
        f"hidden edges (import at the top, or mark a deliberate saving with '# {START_UP} ...'):\n"
        + "\n".join(bad)
    )


def cycles(edges: list[Edge] | None = None) -> list[list[str]]:
    """The strongly connected modules of the import graph of ``edges`` (default: the package's)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in EDGES if edges is None else edges:  # type-only edges too (module docstring)
        graph[e.source].update(_targets(e))
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycle() -> None:
    found = cycles()
    assert not found, "import cycles (strongly connected modules):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def _may_import_private_module(source: str, target: str) -> bool:
    parent = target.rsplit(".", 1)[0]
    if parent == "specsim":
        return False  # a private module of the root is private to no package: see the docstring
    return source == parent or source.rsplit(".", 1)[0] == parent


def private_imports() -> list[str]:
    bad = []
    for e in EDGES:
        if e.external:
            continue
        for part in e.target.split(".")[1:]:
            if part.startswith("_") and not part.startswith("__"):
                private = e.target[: e.target.index(part) + len(part)]
                if not _may_import_private_module(e.source, private):
                    bad.append(f"{e.where}: {e.source} imports the private module {private}")
                break
        for name in e.names:
            full = f"{e.target}.{name}"
            if not (name.startswith("_") and not name.startswith("__")):
                continue
            if _is_module(full):
                if not _may_import_private_module(e.source, full):
                    bad.append(f"{e.where}: {e.source} imports the private module {full}")
            else:
                bad.append(f"{e.where}: {e.source} imports the private name {name} of {e.target}")
    bad += _private_attributes()
    return bad


def _private_attributes() -> list[str]:
    """``m._x`` where ``m`` is a specsim module bound by ``import`` or ``from ... import``."""
    bad = []
    for src in SOURCES:
        bound: dict[str, str] = {}
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("specsim") and alias.asname:
                        bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(src.module, node)
                for alias in node.names:
                    if _is_module(f"{target}.{alias.name}"):
                        bound[alias.asname or alias.name] = f"{target}.{alias.name}"
        for node in ast.walk(src.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and bound[node.value.id] != src.module
            ):
                bad.append(
                    f"{src.where(node.lineno)}: {src.module} reads the private "
                    f"{bound[node.value.id]}.{node.attr}"
                )
    return bad


def test_no_private_name_is_imported_across_modules() -> None:
    bad = private_imports()
    assert not bad, "\n".join(bad)


def long_modules() -> list[str]:
    return [
        f"{src.path.relative_to(ROOT)}: {len(src.lines)} lines"
        for src in SOURCES
        if len(src.lines) > MAX_LINES
    ]


def test_no_module_over_the_size_limit() -> None:
    bad = long_modules()
    assert not bad, f"modules over {MAX_LINES} lines:\n" + "\n".join(bad)


def long_functions(source: str, where: str) -> list[str]:
    """Functions of ``source`` longer than :data:`MAX_FUNCTION_LINES`, their docstring aside."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    lines -= (first.end_lineno or first.lineno) - first.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                bad.append(f"{where}:{node.lineno}: {node.name} has {lines} lines")
    return bad


def test_no_long_function() -> None:
    bad = []
    for src in SOURCES:
        bad += long_functions("\n".join(src.lines), str(src.path.relative_to(ROOT)))
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(bad)


def test_the_function_length_check_can_fail() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))  # + def: 60
    assert long_functions(f'def f():\n    """doc"""\n{body}\n', "m") == []
    assert long_functions(f"def f():\n{body}\n    return 0\n", "m") == ["m:1: f has 61 lines"]


# The checker checks itself on tiny sources --------------------------------------------------
def test_a_type_only_import_closes_a_cycle() -> None:
    """Two modules that name each other's types, one of them only under TYPE_CHECKING, are
    one cycle (the chunked iteration and the loop were, before plans.Iterating)."""
    a, b = "specsim.sim.serving.chunked", "specsim.sim.serving.loop"
    runs = Edge(b, a, ("chunked_iteration",), 1, nested=False, type_only=False, where="b:1")
    typed = Edge(a, b, ("Engine",), 1, nested=False, type_only=True, where="a:1")
    assert cycles([runs, typed]) == [sorted([a, b])]
    assert cycles([runs]) == []


@pytest.mark.parametrize(
    "code, nested, type_only",
    [
        ("import a", False, False),
        ("def f():\n    import a", True, False),
        ("if TYPE_CHECKING:\n    import a", False, True),
        ("class C:\n    def m(self):\n        from a import b", True, False),
    ],
)
def test_walk_sees_where_an_import_is(code: str, nested: bool, type_only: bool) -> None:
    walked = _walk(ast.parse(code))
    found = [(n, t) for node, n, t in walked if isinstance(node, ast.Import | ast.ImportFrom)]
    assert found == [(nested, type_only)]


def test_layers_cover_the_architecture_rows() -> None:
    assert layer("specsim.theory.numeric") == layer("specsim.sampling") < layer("specsim.sim")
    assert layer("specsim.sim.serving") < layer("specsim.validate.forms") < layer("specsim.cli")
    assert _may_import_private_module("specsim.problems._yield", "specsim.problems._core")
    assert _may_import_private_module("specsim.problems", "specsim.problems._core")
    assert not _may_import_private_module("specsim.cli.problems", "specsim.problems._core")
    assert not _may_import_private_module("specsim.cost", "specsim._roofline")


def test_sim_layers_order_the_folders() -> None:
    assert sim_layer("specsim.sim.costs.source") < sim_layer("specsim.sim.results.records")
    assert sim_layer("specsim.sim.results.records") < sim_layer("specsim.sim.stream.stream")
    assert sim_layer("specsim.sim.stream.stream") < sim_layer("specsim.sim.serving.loop")
    assert sim_layer("specsim.sim.serving") < sim_layer("specsim.sim.disagg.simulate")
    assert sim_folder("specsim.sim") is None and sim_folder("specsim.cost.model") is None
    up = Edge(
        "specsim.sim.stream.stream",
        "specsim.sim.serving.batch",
        ("Requests",),
        1,
        nested=False,
        type_only=True,
        where="s:1",
    )
    down = Edge(
        "specsim.sim.serving.batch",
        "specsim.sim.stream.stream",
        ("run_lengths",),
        1,
        nested=False,
        type_only=False,
        where="b:1",
    )
    assert sim_upward_imports([up]) and sim_upward_imports([down]) == []
