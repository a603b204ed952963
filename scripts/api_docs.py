"""Build the API reference with pdoc, and fail on pdoc's warnings and on broken references.

    python scripts/api_docs.py [OUTPUT]      # `make docs`; OUTPUT defaults to build/api
    python scripts/api_docs.py --check       # the checks alone, nothing written (tests/test_api_docs.py)

Every public module of the package is documented: all but ``_private`` ones and the deprecated
``dcaf_like.mcp`` alias. Besides pdoc's own warnings, every Sphinx-style reference in a docstring
(``:class:`~dcaf_like.toolsets.Toolset```, ``:meth:`progress```, ...) must name something that exists:
pdoc renders one that names nothing as plain text and says nothing. A reference is looked up as a
dotted path (modules imported as needed), then in its class, its module, the package and the builtins.
Exit status: 0 when clean, 1 with one line per problem on stderr.
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import pkgutil
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pdoc
import pdoc.doc
import pdoc.render

PACKAGE = "dcaf_like"
SKIPPED = {"dcaf_like.mcp"}  # a deprecated alias of dcaf_like.toolsets.mcp: importing it warns
ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|exc|data|obj|const):`([^`]+)`")


def public_modules() -> list[str]:
    package = importlib.import_module(PACKAGE)
    names = [PACKAGE]
    for info in pkgutil.walk_packages(package.__path__, f"{PACKAGE}."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or any(info.name.startswith(s) for s in SKIPPED):
            continue
        names.append(info.name)
    return sorted(names)


def load_lazy_names(names: list[str]) -> None:
    """``from dcaf_like import RemoteAgent`` works through the module's ``__getattr__``, which pdoc
    does not call: resolve such names of ``__all__`` once, so the reference shows them where users
    import them from."""
    for name in names:
        module = importlib.import_module(name)
        if hasattr(module, "__getattr__"):
            for attr in getattr(module, "__all__", ()):
                if attr not in vars(module):
                    setattr(module, attr, getattr(module, attr))


def documented(module: pdoc.doc.Module) -> Iterator[pdoc.doc.Doc[Any]]:
    """The module and everything defined in it, classes' members included."""
    yield module
    stack: list[pdoc.doc.Doc[Any]] = list(module.own_members)
    while stack:
        item = stack.pop()
        if item.taken_from[0] != module.modulename:
            continue  # imported from elsewhere: checked where it is defined
        yield item
        if isinstance(item, pdoc.doc.Class):
            stack.extend(item.own_members)


def _lookup(path: str) -> bool:
    """True if `path` is a module, or an attribute reached from the longest importable prefix."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _in(namespace: Any, path: str) -> bool:
    obj = namespace
    for attr in path.split("."):
        if isinstance(obj, dict):
            if attr not in obj:
                return False
            obj = obj[attr]
        elif hasattr(obj, attr):
            obj = getattr(obj, attr)
        else:
            # Set in __init__ (``self.asgi = ...``): pdoc documents it, hasattr on the class cannot see it.
            return isinstance(obj, type) and attr in _instance_attributes(obj)
    return True


def _instance_attributes(cls: type) -> set[str]:
    found: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith(PACKAGE):
            name = (klass.__module__, klass.__qualname__)
            found.update(pdoc.doc.Class(*name, klass, name).members)
    return found


def resolves(target: str, item: pdoc.doc.Doc[Any]) -> bool:
    path = target.lstrip("~").removesuffix("()")
    if "<" in path:  # :class:`text <target>`
        path = path.split("<", 1)[1].rstrip(">").strip().lstrip("~")
    module = sys.modules[item.modulename]
    if path.startswith("."):  # relative to the module's package
        package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
        return _lookup(f"{package}{path}")
    owner: Any = None
    if isinstance(item, pdoc.doc.Class):
        owner = item.obj
    elif "." in item.qualname:
        owner = _in(vars(module), item.qualname.rsplit(".", 1)[0]) and _owner(module, item.qualname)
    scopes: list[Any] = [owner, vars(module), vars(importlib.import_module(PACKAGE)), vars(builtins)]
    return _lookup(path) or any(scope is not None and _in(scope, path) for scope in scopes)


def _owner(module: Any, qualname: str) -> Any:
    obj = module
    for attr in qualname.split(".")[:-1]:
        obj = getattr(obj, attr)
    return obj


def broken_references(modules: list[pdoc.doc.Module]) -> list[str]:
    problems = []
    for module in modules:
        for item in documented(module):
            for match in ROLE.finditer(item.docstring or ""):
                if not resolves(match.group(2), item):
                    problems.append(f"{item.fullname}: {match.group(0)} names nothing that exists")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("output", nargs="?", default="build/api", type=Path)
    parser.add_argument("--check", action="store_true", help="check only; write nothing")
    args = parser.parse_args(argv)

    problems: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = public_modules()
        load_lazy_names(names)
        pdoc.render.configure(
            docformat="restructuredtext",
            show_source=False,
            footer_text=f"{PACKAGE} API reference",
        )
        modules = [pdoc.doc.Module.from_name(name) for name in names]
        # Rendering every page is what finds most of pdoc's warnings; --check renders them in memory.
        all_modules = {m.modulename: m for m in modules}
        pages = {m.modulename: pdoc.render.html_module(m, all_modules) for m in modules}
        if not args.check:
            args.output.mkdir(parents=True, exist_ok=True)
            for name, html in pages.items():
                page = args.output / f"{name.replace('.', '/')}.html"
                page.parent.mkdir(parents=True, exist_ok=True)
                page.write_text(html, encoding="utf-8")
            for extra, text in (
                ("index.html", pdoc.render.html_index(all_modules)),
                ("search.js", pdoc.render.search_index(all_modules)),
            ):
                if text:
                    (args.output / extra).write_text(text, encoding="utf-8")
    problems += [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}" for w in caught]
    problems += broken_references(modules)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not args.check and not problems:
        print(f"{len(modules)} modules documented in {args.output}/ (open index.html)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
