"""The API reference: every public name is documented, and the mkdocs site builds without warnings.

(a) Each public function, class and module (``__all__`` of ``tcgemm`` and of its public modules;
for a module without ``__all__``, the functions and classes it defines under public names) has a
docstring, and so do the public methods and properties of the public classes. A callable whose
signature has parameters (other than ``self`` / ``cls``) documents each of them: in its ``Args:``
section when the docstring has one (then every parameter must be listed there), else by name
somewhere in the text (short functions). A class's constructor parameters are read from the class
docstring together with its ``__init__``'s. Constants (presets, tuples, dicts) and typing aliases
are exempt.

(b) ``mkdocs build --strict`` of ``mkdocs.yml`` (mkdocstrings reads the package source with griffe,
so no compiled extension is needed). Skipped where mkdocs, mkdocs.yml or the ``tcgemm/`` source
folder beside it is absent (a copy of the tests run against an installed wheel).
"""

import dataclasses
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS_YML = ROOT / "mkdocs.yml"

# Public modules whose names are checked; the optional ones need a package (or a torch feature).
MODULES = (
    "tcgemm", "tcgemm.layer", "tcgemm.weights", "tcgemm.gptq", "tcgemm.calibration", "tcgemm.model",
    "tcgemm.scheme", "tcgemm.int4", "tcgemm.rotation", "tcgemm.reference", "tcgemm.nn", "tcgemm.checkpoint",
)
OPTIONAL_MODULES = {"tcgemm.compressed": "compressed_tensors", "tcgemm.parallel": "torch.distributed.tensor",
                    "tcgemm.hf": "transformers"}

_SECTION = re.compile(r"^(\s*)([A-Z][A-Za-z ]*):\s*$")  # "Args:", "Returns:", "Example:", ...
_ARG_ENTRY = r"^{indent}(\*{{0,2}}\w+)\s*(\([^)]*\))?\s*:"


def _import(name):
    if name in OPTIONAL_MODULES:
        pytest.importorskip(OPTIONAL_MODULES[name], reason=f"{name} needs {OPTIONAL_MODULES[name]}")
    return importlib.import_module(name)


def _in_package(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "tcgemm"


def _public_names(module):
    """``__all__``, or the functions and classes the module defines under public names."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
            and getattr(value, "__module__", None) == module.__name__]


def _own_doc(obj) -> str:
    """The docstring written for ``obj`` (not one inherited, nor the signature a dataclass makes up)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not doc:
        return ""
    if dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""  # the signature dataclasses.dataclass writes where the class has no docstring
    return inspect.cleandoc(doc)


def _args_section(doc: str):
    """The parameter names listed in the docstring's ``Args:`` section, or None without one."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        m = _SECTION.match(line)
        if not m or m.group(2) not in ("Args", "Arguments"):
            continue
        names, entry_indent = set(), None
        for body in lines[i + 1:]:
            if not body.strip():
                continue
            indent = len(body) - len(body.lstrip())
            if indent <= len(m.group(1)):
                break  # the next section (or text) at the heading's level
            if entry_indent is None:
                entry_indent = indent
            if indent == entry_indent:
                e = re.match(_ARG_ENTRY.format(indent=" " * entry_indent), body)
                if e:
                    names.add(e.group(1).lstrip("*"))
        return names
    return None


def _parameters(func, skip_first: bool):
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    params = list(sig.parameters.values())
    if skip_first and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [p.name for p in params if p.name not in ("self", "cls")]


def _undocumented(params, doc: str):
    listed = _args_section(doc)
    if listed is not None:
        return [p for p in params if p not in listed]
    return [p for p in params if not re.search(rf"(?<![\w]){re.escape(p)}(?![\w])", doc)]


def _check_callable(where: str, func, problems: list, skip_first: bool = False):
    doc = _own_doc(func)
    if not doc.strip():
        problems.append(f"{where}: no docstring")
        return
    missing = _undocumented(_parameters(func, skip_first), doc)
    if missing:
        problems.append(f"{where}: parameters not documented: {', '.join(missing)}")


def _init_owner(cls):
    """The class of the MRO that defines ``__init__`` (a dataclass's is generated on it)."""
    for klass in cls.__mro__:
        if "__init__" in klass.__dict__:
            return klass
    return object


def _check_class(where: str, cls, problems: list):
    doc = _own_doc(cls)
    if not doc.strip():
        problems.append(f"{where}: no docstring")
    owner = _init_owner(cls)
    if _in_package(owner):  # a constructor of the package's (on the class or a base of its own)
        init_doc = inspect.cleandoc(owner.__dict__["__init__"].__doc__ or "")
        params = _parameters(cls.__init__, skip_first=True)
        listed = [d for d in (doc, init_doc) if _args_section(d) is not None]
        if listed:  # an Args: section (on the class or on __init__) must list every parameter
            names = set().union(*(_args_section(d) for d in listed))
            missing = [p for p in params if p not in names]
        else:
            missing = _undocumented(params, doc + "\n" + init_doc)
        if missing and doc.strip():
            problems.append(f"{where}: constructor parameters not documented: {', '.join(missing)}")
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, property):
            func = raw.fget
            if func is not None and _in_package(func) and not _own_doc(func).strip():
                problems.append(f"{where}.{name}: property without a docstring")
            continue
        if isinstance(raw, (staticmethod, classmethod)):
            func, skip_first = raw.__func__, isinstance(raw, classmethod)
        elif inspect.isfunction(raw):
            func, skip_first = raw, True
        else:
            continue  # a field, a constant
        if _in_package(func):
            _check_callable(f"{where}.{name}", func, problems, skip_first=skip_first)


def _problems(module_name: str):
    module = _import(module_name)
    problems = []
    if not _own_doc(module).strip():
        problems.append(f"{module_name}: module without a docstring")
    for name in _public_names(module):
        obj = getattr(module, name)
        where = f"{module_name}.{name}"
        if inspect.ismodule(obj):
            if not _own_doc(obj).strip():
                problems.append(f"{where}: module without a docstring")
        elif inspect.isclass(obj):
            _check_class(where, obj, problems)
        elif inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.ismethod(obj):
            _check_callable(where, obj, problems)
        # else: a constant (a preset, a tuple, a dict) or a typing alias: exempt
    return problems


@pytest.mark.parametrize("module_name", MODULES + tuple(OPTIONAL_MODULES))
def test_public_names_documented(module_name):
    problems = _problems(module_name)
    assert not problems, "undocumented public API:\n  " + "\n  ".join(problems)


def test_args_section_parser():
    doc = inspect.cleandoc("""Summary.

        Args:
            a: first.
            b (int): second,
                continued: not an entry.
            *rest: more.

        Returns:
            c: not an argument.
        """)
    assert _args_section(doc) == {"a", "b", "rest"}
    assert _args_section("No section; mentions x.") is None
    assert _undocumented(["a", "b", "c"], doc) == ["c"]
    assert _undocumented(["x", "y"], "Scales x by two.") == ["y"]


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed")
    pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings-python is not installed")
    if not MKDOCS_YML.is_file():
        pytest.skip(f"no mkdocs.yml at {MKDOCS_YML} (a copy of the tests without the docs)")
    if not (ROOT / "tcgemm").is_dir():
        pytest.skip(f"no package source folder {ROOT / 'tcgemm'} beside mkdocs.yml: mkdocstrings reads the "
                    "API reference from the source")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(MKDOCS_YML), "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0:
        print(result.stderr)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
