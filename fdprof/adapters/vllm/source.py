"""The plugin's targets (:mod:`fdprof.adapters.vllm.targets`) resolved from vLLM's source,
without importing it: a wheel (a zip) or an installed ``site-packages``, parsed with ``ast``.

Why: a vLLM release can be checked before anyone installs it (a CUDA wheel does not even
import here), and the facts kept beside the tests (``tests/adapters/data/``) check the table
again on every run without the network. Classes are found where the hooks import them from,
following ``from X import Name`` re-exports, and their bases in the order Python would search
them for a single chain (the first base first); a base outside the source (``ABC``,
``msgspec.Struct``) adds nothing.

``python -m fdprof.adapters.vllm.source WHEEL_OR_SITE_PACKAGES [--out FILE]`` prints (or
writes) the facts as JSON with the version, the file and its SHA-256.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import re
import sys
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from fdprof.adapters.vllm.targets import (
    TARGETS,
    Abstract,
    Fact,
    Fields,
    Method,
    Target,
    asked,
    narrow,
)

#: how deep ``from X import Name`` re-exports and base classes are followed
MAX_DEPTH = 8


class Source:
    """vLLM's Python files, by path inside the distribution (``vllm/v1/core/block_pool.py``)."""

    def __init__(self, read: Callable[[str], str | None], origin: str) -> None:
        self._read = read
        self.origin = origin
        self.module = cache(self._module)

    @classmethod
    def open(cls, path: Path) -> Source:
        """A wheel (``.whl``) or a directory holding the ``vllm`` package."""
        if path.is_dir():
            return cls(lambda name: _read_file(path / name), str(path))
        wheel = zipfile.ZipFile(path)
        names = set(wheel.namelist())

        def read(name: str) -> str | None:
            return wheel.read(name).decode() if name in names else None

        return cls(read, path.name)

    def _module(self, module: str) -> tuple[ast.Module, bool] | None:
        """The parsed module and whether it is a package (``__init__.py``)."""
        base = module.replace(".", "/")
        for name, package in ((f"{base}.py", False), (f"{base}/__init__.py", True)):
            text = self._read(name)
            if text is not None:
                return ast.parse(text, filename=name), package
        return None

    def version(self) -> str:
        """``vllm.__version__`` as the distribution writes it (``vllm/_version.py``)."""
        text = self._read("vllm/_version.py") or ""
        found = re.search(r"""__version__\s*=\s*version\s*=\s*['"]([^'"]+)['"]""", text)
        return found[1] if found else "?"

    # -- classes ------------------------------------------------------------------------

    def find_class(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """The class ``name`` as ``module`` defines or re-exports it: (defining module, node)."""
        parsed = self.module(module)
        if parsed is None or depth > MAX_DEPTH:
            return None
        tree, package = parsed
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
        for node in ast.walk(tree):  # re-exports, also under ``if TYPE_CHECKING`` and ``try``
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        origin = _absolute(module, package, node)
                        found = self.find_class(origin, alias.name, depth + 1)
                        if found is not None:
                            return found
        return None

    def lineage(self, module: str, node: ast.ClassDef, depth: int = 0) -> list[ast.ClassDef]:
        """``node`` and its bases found in the source, depth first, each once."""
        out = [node]
        if depth > MAX_DEPTH:
            return out
        for base in node.bases:
            if not isinstance(base, ast.Name):
                continue  # ``msgspec.Struct``, ``Generic[T]``: outside, or not a class
            found = self.find_class(module, base.id)
            if found is not None:
                for klass in self.lineage(*found, depth + 1):
                    if klass not in out:
                        out.append(klass)
        return out

    # -- facts --------------------------------------------------------------------------

    def fact(self, target: Target) -> Fact:
        found = self.find_class(target.module, target.owner)
        if found is None:
            return None
        lineage = self.lineage(*found)
        methods = [node for klass in lineage for node in klass.body
                   if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]  # fmt: skip
        if isinstance(target, Method):
            named = [m for m in methods if m.name == target.name]
            return _parameters(named[0].args) if named else None
        if isinstance(target, Abstract):
            abstract = [m for m in methods if any(_named(d, "abstractmethod")
                                                  for d in m.decorator_list)]  # fmt: skip
            return sorted({m.name for m in abstract})
        if isinstance(target, Fields):
            names: dict[str, None] = {}
            for klass in reversed(lineage):
                names.update(dict.fromkeys(
                    n.target.id for n in klass.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                ))  # fmt: skip
            return list(names)
        return _init_attributes(lineage)

    def facts(self, targets: tuple[Target, ...] = TARGETS) -> dict[str, Fact]:
        return {t.key: self.fact(t) for t in targets}


def _named(node: ast.expr, name: str) -> bool:
    """``name`` or ``something.name`` (a decorator as written)."""
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name
    )


def _read_file(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def _absolute(module: str, package: bool, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` in ``module`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    keep = len(parts) - node.level + (1 if package else 0)
    return ".".join(parts[:keep] + ([node.module] if node.module else []))


def _parameters(args: ast.arguments) -> list[str]:
    """Parameter names in the order ``inspect.signature`` lists them."""
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    if args.vararg:
        names.append(args.vararg.arg)
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append(args.kwarg.arg)
    return names


def _init_attributes(lineage: list[ast.ClassDef]) -> list[str]:
    """Attributes assigned on ``self`` in the ``__init__`` of each class of ``lineage``."""
    names: dict[str, None] = {}
    for klass in lineage:
        for node in klass.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                for sub in ast.walk(node):
                    targets = (sub.targets if isinstance(sub, ast.Assign) else
                               [sub.target] if isinstance(sub, ast.AnnAssign) else [])  # fmt: skip
                    for target in targets:
                        for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                            if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                                    and t.value.id == "self"):  # fmt: skip
                                names[t.attr] = None
    return list(names)


def extract(path: Path) -> dict[str, Any]:
    """The facts of the vLLM at ``path`` with where they came from (a wheel: its SHA-256)."""
    source = Source.open(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return {
        "vllm": source.version(),
        "source": source.origin,
        "sha256": digest,
        "extracted": datetime.date.today().isoformat(),
        "asked": {t.key: asked(t) for t in TARGETS},
        "facts": narrow(source.facts()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fdprof.adapters.vllm.source",
        description="Resolve the vLLM plugin's targets in a wheel or site-packages, by ast.",
    )
    ap.add_argument("path", type=Path, help="a vLLM wheel, or the directory holding vllm/")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = ap.parse_args(argv)
    if not args.path.exists():
        print(f"{args.path}: no such file or directory", file=sys.stderr)
        return 2
    text = json.dumps(extract(args.path), indent=1, sort_keys=True) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
