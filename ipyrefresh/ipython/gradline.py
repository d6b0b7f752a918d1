"""Parsing and evaluating a ``%grad`` line: ``%grad [options] f(args)``.

Every failure is a :class:`GradLineError` with one readable sentence; nothing here
changes the user's namespace (arguments are evaluated, never assigned).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import numpy as np
from autograd.tracer import isbox

#: Options of ``%grad`` that take a value (the call expression starts after them).
_VALUED = {"-a", "--argnum", "--backend"}


class GradLineError(Exception):
    """A one-line, user-facing error about a ``%grad`` line."""


def split_options(line: str) -> tuple[str, str]:
    """``"-a 1 --hessian f(x, 'a b')"`` -> ``("-a 1 --hessian", "f(x, 'a b')")``.

    The options are parsed by IPython's ``magic_arguments``; the call expression is kept
    verbatim (quotes and spaces included), which an argv split would not do.
    """
    rest = line.strip()
    taken: list[str] = []
    while rest.startswith("-"):
        word, _, after = rest.partition(" ")
        taken.append(word)
        rest = after.lstrip()
        if word in _VALUED and rest:
            value, _, after = rest.partition(" ")
            taken.append(value)
            rest = after.lstrip()
    return " ".join(taken), rest


def parse_argnum(text: str) -> int | tuple[int, ...]:
    parts = [p for p in text.strip("()[] ").split(",") if p.strip()]
    try:
        nums = tuple(int(p) for p in parts)
    except ValueError:
        raise GradLineError(f"argnum must be an integer or a list like 0,1, not {text!r}") from None
    if not nums:
        raise GradLineError("argnum needs a value, e.g. -a 1")
    if any(n < 0 for n in nums):
        raise GradLineError(f"argnum must not be negative, got {text!r}")
    return nums[0] if len(nums) == 1 else nums


@dataclass
class GradCall:
    fn: Any
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _eval(node: ast.expr, ns: dict[str, Any], what: str) -> Any:
    try:
        code = compile(ast.Expression(node), "<%grad>", "eval")
    except SyntaxError as exc:  # (parsed, but not an expression eval runs: await, yield)
        raise GradLineError(f"could not compile {what!r}: {exc.msg}") from None
    try:
        return eval(code, ns)
    except NameError as exc:
        raise GradLineError(str(exc)) from None
    except Exception as exc:
        raise GradLineError(f"evaluating {what} raised {type(exc).__name__}: {exc}") from None


def parse_call(expr: str, ns: dict[str, Any]) -> GradCall:
    """Evaluate ``f(args)`` piecewise in ``ns``: the callee and its arguments."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise GradLineError(f"could not parse {expr!r}: {exc.msg}") from None
    if any(isinstance(node, ast.NamedExpr) for node in ast.walk(tree)):
        # eval() would bind the name in the user's namespace.
        raise GradLineError("assignment expressions (:=) are not allowed in a %grad line")
    call = tree.body
    if not isinstance(call, ast.Call):
        raise GradLineError(f"expected a call such as f(1.0), got {expr!r}")
    name = ast.unparse(call.func)
    fn = _eval(call.func, ns, name)
    if not callable(fn):
        raise GradLineError(f"{name!r} is not callable (it is a {type(fn).__name__})")
    args: list[Any] = []
    for node in call.args:
        if isinstance(node, ast.Starred):
            value = _eval(node.value, ns, ast.unparse(node.value))
            try:
                args.extend(value)
            except TypeError:
                raise GradLineError(f"*{ast.unparse(node.value)} is not iterable") from None
        else:
            args.append(_eval(node, ns, ast.unparse(node)))
    kwargs: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            value = _eval(kw.value, ns, ast.unparse(kw.value))
            if type(value) is not dict:
                raise GradLineError(f"**{ast.unparse(kw.value)} is not a dict")
            for key, item in value.items():
                _keyword(kwargs, key, item)
        else:
            _keyword(kwargs, kw.arg, _eval(kw.value, ns, ast.unparse(kw.value)))
    return GradCall(fn, name, tuple(args), kwargs)


def _keyword(kwargs: dict[str, Any], name: Any, value: Any) -> None:
    """One keyword argument, refused where Python's call would refuse it."""
    if type(name) is not str:
        raise GradLineError(f"keywords must be strings, not {type(name).__name__}")
    if name in kwargs:
        raise GradLineError(f"keyword argument repeated: {name}")
    kwargs[name] = value


def check_inputs(call: GradCall, argnum: int | tuple[int, ...]) -> None:
    """Catch the common mistakes before autograd turns them into a traceback."""
    nums = (argnum,) if isinstance(argnum, int) else argnum
    for i in nums:
        if i >= len(call.args):
            given = len(call.args)
            raise GradLineError(
                f"argnum {i} is out of range: {call.name} was given {given} positional "
                f"argument{'s' if given != 1 else ''}"
            )
        x = call.args[i]
        t = type(x)
        if t in (int, bool) or (issubclass(t, (np.ndarray, np.generic)) and x.dtype.kind in "biu"):
            hint = float(x) if t in (int, bool) else "x.astype(float)"
            raise GradLineError(
                f"cannot differentiate {call.name} with respect to argument {i}, an integer "
                f"({x!r}); pass a float such as {hint}"
            )


def _box_reached_plain_numpy(exc: BaseException) -> bool:
    """Did a traced value end up inside numpy itself (not autograd.numpy)?"""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        name = frame.f_code.co_filename.replace("\\", "/")
        plain_numpy = "/numpy/" in name and "/autograd/" not in name
        if plain_numpy and any(isbox(v) for v in list(frame.f_locals.values())):
            return True
        tb = tb.tb_next
    return False


def explain_failure(exc: BaseException, call: GradCall, transform: str) -> str:
    """One line for an exception raised while computing a derivative."""
    try:
        msg = str(exc)
    except Exception:
        msg = "<unprintable>"
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    if "ArrayBox" in msg or "SequenceBox" in msg or _box_reached_plain_numpy(exc):
        return (
            f"cannot differentiate {call.name}: it calls a function autograd cannot trace "
            f"({first}); use autograd.numpy instead of numpy"
        )
    if isinstance(exc, NotImplementedError) or (
        isinstance(exc, TypeError)
        and any(s in msg for s in ("differentiate", "scalar-output", "real-output", "Grad only"))
    ):
        return f"cannot differentiate {call.name}: {first}"
    return f"{call.name}(...) raised {type(exc).__name__}: {first}"
