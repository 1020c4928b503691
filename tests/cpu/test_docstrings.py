"""Every public name of tk_ops documents itself where ``help()`` reaches it, without the extension.

Public here: the functions and modules in ``tk_ops.__all__``, the public functions of the kernel families' modules
(``tk_ops.attention.head_dims``, ...), the functions of ``tk_ops.flash_attn.__all__``, the classes of
``tk_ops.nn.__all__`` with the public methods they define, and the exceptions of ``tk_ops.errors``. Each callable's
own docstring (``__doc__``, not one inherited from torch) must be of real length and hold what a user needs without
going elsewhere: what it returns, its gradients, the tk_ops errors it raises, and an ``Example::`` block that
compiles and calls it; its parameters and result carry type hints that resolve. The examples need a GPU, so they
are blocks without ``>>>`` prompts, which doctest would collect and run.
"""
from __future__ import annotations

import importlib
import inspect
import pydoc
import re
import textwrap
import types
import typing

import pytest

import tk_ops
import tk_ops.nn as tk_nn
from tk_ops import errors

MIN_CHARS = 300
FAMILY_MODULES = ("tk_ops.gemm", "tk_ops.attention", "tk_ops.based", "tk_ops.mamba2", "tk_ops.fftconv")
# torch.nn.Module's display hook: modules override it, users never call it.
NOT_USER_METHODS = frozenset({"extra_repr"})

ERROR_NAMES = sorted(name for name, obj in vars(errors).items()
                     if isinstance(obj, type) and issubclass(obj, errors.TkOpsError))
# A function's or method's result has its own section; a class says what its forward returns.
RETURNS_SECTION = re.compile(r"^ *Returns:", re.MULTILINE)
RETURNS = re.compile(r"\breturns?\b", re.IGNORECASE)
GRADIENTS = re.compile(r"differentiab|gradient|autograd|backward|no_grad|\bgrad\b", re.IGNORECASE)
RAISES = re.compile(r"\b(" + "|".join(ERROR_NAMES) + r")\b|\bno tk_ops error\b", re.IGNORECASE)
EXAMPLE = re.compile(r"^( *)Examples?::[ \t]*$", re.MULTILINE)
# A callable's docstring holds its essentials itself: no pointer to a module's, a class's or another docstring.
POINTER = re.compile(r"docstring", re.IGNORECASE)
MODULE_POINTER = re.compile(r"\b(module|class)('s)? docstring", re.IGNORECASE)

# Public functions whose docstrings live in files maintained separately and do not meet the bar yet. Each must keep
# failing (strict): once its docstring is fixed, the entry goes and the function is checked like the others.
PENDING: dict[str, str] = {}


class Item(typing.NamedTuple):
    name: str
    obj: object
    kind: str  # "function", "method", "class" or "error"
    call: str | None  # what the example must call, None when any call does (forward runs as module(x))


def _own_functions(module: types.ModuleType) -> list[tuple[str, object]]:
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    return [(n, getattr(module, n)) for n in names
            if inspect.isfunction(getattr(module, n)) and getattr(module, n).__module__ == module.__name__]


def _items() -> list[Item]:
    items, seen = [], set()

    def add(name, obj, kind, call):
        if id(obj) not in seen:
            seen.add(id(obj))
            items.append(Item(name, obj, kind, call))

    for name in tk_ops.__all__:
        obj = getattr(tk_ops, name)
        if inspect.isfunction(obj):
            add(f"tk_ops.{name}", obj, "function", name)
    for module_name in FAMILY_MODULES:
        for name, obj in _own_functions(importlib.import_module(module_name)):
            add(f"{module_name}.{name}", obj, "function", name)
    for name, obj in _own_functions(tk_ops.flash_attn):
        add(f"tk_ops.flash_attn.{name}", obj, "function", name)
    for cls_name in tk_nn.__all__:
        cls = getattr(tk_nn, cls_name)
        add(f"tk_ops.nn.{cls_name}", cls, "class", cls_name)
        for name, attr in vars(cls).items():
            if name.startswith("_") or name in NOT_USER_METHODS:
                continue
            if isinstance(attr, (classmethod, staticmethod)):
                attr = attr.__func__
            if inspect.isfunction(attr):
                add(f"tk_ops.nn.{cls_name}.{name}", attr, "method", None if name == "forward" else name)
    for name in ERROR_NAMES:
        add(f"tk_ops.errors.{name}", getattr(errors, name), "error", name)
    return items


ITEMS = _items()


def _params():
    for item in ITEMS:
        marks = [pytest.mark.xfail(strict=True, reason=PENDING[item.name])] if item.name in PENDING else []
        yield pytest.param(item, id=item.name, marks=marks)


def _own_doc(obj) -> str:
    # Classes inherit no __doc__ attribute lookups here: vars() holds only what the class itself wrote.
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__
    return inspect.cleandoc(doc) if doc else ""


def _example(doc: str) -> str | None:
    """The code of the docstring's first Example:: block, dedented; None if it has none."""
    found = EXAMPLE.search(doc)
    if found is None:
        return None
    indent = len(found.group(1))
    lines = []
    for line in doc[found.end():].split("\n")[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines)).strip()


def _signature_problems(func, skip_first: bool) -> list[str]:
    sig = inspect.signature(func)
    params = list(sig.parameters.values())[1 if skip_first else 0:]
    problems = [f"*{p.name} / **{p.name}: spell the parameters out" for p in params
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    problems += [f"parameter {p.name} has no type hint" for p in params if p.annotation is p.empty]
    if sig.return_annotation is sig.empty:
        problems.append("no return type hint")
    try:
        typing.get_type_hints(func)
    except (NameError, AttributeError, TypeError, SyntaxError) as e:  # a hint naming what the module lacks
        problems.append(f"type hints do not resolve: {e!r}")
    return problems


def test_the_walk_covers_the_public_surface():
    """The items are found by walking, so a new public function or method is checked without editing this file; the
    walk itself must not come back short."""
    names = {item.name for item in ITEMS}
    for name in ("tk_ops.matmul", "tk_ops.attention", "tk_ops.based_step", "tk_ops.mamba2_step",
                 "tk_ops.fftconv_spectrum", "tk_ops.attention.head_dims", "tk_ops.based.value_dims",
                 "tk_ops.nn.Linear.from_linear", "tk_ops.nn.Mamba2.step", "tk_ops.nn.LongConv.convolve",
                 "tk_ops.errors.InputError", "tk_ops.flash_attn.flash_attn_func"):
        assert name in names, name
    functions = [n for n in tk_ops.__all__ if inspect.isfunction(getattr(tk_ops, n))]
    assert len(functions) >= 13
    assert all(f"tk_ops.{n}" in names for n in functions)
    assert set(PENDING) <= names, "a PENDING entry names nothing the walk finds"


@pytest.mark.parametrize("item", list(_params()))
def test_docstring(item: Item):
    doc = _own_doc(item.obj)
    problems = []
    if len(doc) < MIN_CHARS:
        problems.append(f"docstring of {len(doc)} characters (at least {MIN_CHARS})")
    if POINTER.search(doc):
        problems.append("points to another docstring: " + doc[max(0, POINTER.search(doc).start() - 60):][:100])
    if ">>>" in doc:
        problems.append("'>>>' prompts: doctest would collect an example that needs a GPU; use an Example:: block")
    example = _example(doc)
    if not example:
        problems.append("no Example:: block with code under it")
    else:
        try:
            compile(example, f"<example of {item.name}>", "exec")
        except SyntaxError as e:
            problems.append(f"the example does not compile: {e}")
        if item.kind == "error":
            if item.call not in example:
                problems.append(f"the example does not use {item.call}")
        elif "(" not in example or (item.call and not re.search(rf"\b{re.escape(item.call)}\(", example)):
            problems.append(f"the example does not call {item.call or 'the module'}")
    if item.kind in ("function", "method") and not RETURNS_SECTION.search(doc):
        problems.append("no 'Returns:' section")
    if item.kind != "error":
        if not RETURNS.search(doc):
            problems.append("says nothing of what it returns")
        func = item.obj.__init__ if item.kind == "class" else item.obj
        params = list(inspect.signature(func).parameters)[1 if item.kind in ("class", "method") else 0:]
        problems += [f"parameter {name} is not described" for name in params
                     if not re.search(rf"(?<![\w.]){re.escape(name)}\b", doc)]
        if not GRADIENTS.search(doc):
            problems.append("says nothing of gradients (differentiable, or not)")
        if not RAISES.search(doc):
            problems.append(f"names none of the tk_ops errors it raises ({', '.join(ERROR_NAMES)}) "
                            "nor says 'No tk_ops error'")
    if item.kind in ("function", "method"):
        problems += _signature_problems(item.obj, skip_first=item.kind == "method")
    elif item.kind == "class":
        problems += _signature_problems(item.obj.__init__, skip_first=True)
    assert not problems, f"{item.name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("name", ["tk_ops.attention", "tk_ops.based", "tk_ops.mamba2_chunk_scan", "tk_ops.fftconv",
                                  "tk_ops.matmul", "tk_ops.nn.Attention", "tk_ops.nn.Mamba2"])
def test_help_shows_the_callables_own_docstring(name):
    """help(tk_ops.attention) renders the function (the attribute tk_ops.attention is the function, not its module)
    with its own docstring: the first line and the example's call."""
    obj = tk_ops
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    assert not inspect.ismodule(obj), name
    text = pydoc.render_doc(obj, renderer=pydoc.plaintext)
    doc = _own_doc(obj)
    assert doc.split("\n")[0] in text
    assert _example(doc).split("\n")[-1] in text


@pytest.mark.parametrize("module", [tk_ops, tk_nn, errors, tk_ops.reference, tk_ops.flash_attn]
                         + [importlib.import_module(m) for m in FAMILY_MODULES], ids=lambda m: m.__name__)
def test_module_docstring(module):
    """The package, the modules of tk_ops.__all__ and the families' modules say what they hold; a module docstring
    may keep design background but points to no other docstring for it."""
    doc = inspect.getdoc(module) or ""
    assert len(doc) >= MIN_CHARS, f"{module.__name__}: a module docstring of {len(doc)} characters"
    assert not MODULE_POINTER.search(doc), module.__name__
    assert ">>>" not in doc, module.__name__


def test_module_entries_of_all_are_checked():
    """Every module named in tk_ops.__all__ has its docstring checked above."""
    modules = {getattr(tk_ops, n).__name__ for n in tk_ops.__all__ if inspect.ismodule(getattr(tk_ops, n))}
    assert modules == {"tk_ops.nn", "tk_ops.errors", "tk_ops.reference", "tk_ops.flash_attn"}
