"""What the tape keeps of a run, changed afterwards (hunt 14): each was a wrong answer with
``status()`` calling the entry fresh.

The tape keeps the objects its ops computed with, and the differentiated argument, by
reference; the guard compares values. A change of one of them after its use — by the
function (a buffer refilled, a global changed and restored), or by the caller before the
replay is generated or after (an index array, a list, a deque, a global list rebound to
an equal one) — must not reach the replay. Each case is a small notebook, run first with
plain ``autograd.grad`` as the handle (the scenario is valid autograd), then in a cleared
namespace with ``%load_ext ipyrefresh``, every answer against a fresh autograd computation.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest

from .conftest import Shell
from .scenario_helpers import PRELUDE, assert_same, diff, states


class WrongAnswer(AssertionError):
    """With ipyrefresh loaded, the handle answered differently from autograd."""


@dataclass(frozen=True)
class Ask:
    """Call the handle (``call``) ``times`` times, each time followed by ``oracle``."""

    call: str
    oracle: str
    times: int = 1


def notebook(shell: Shell, *steps: str | Ask, handle: str = "df") -> None:
    """Run ``steps`` (a str is a cell) with plain autograd, then with ipyrefresh; only the
    second run may raise WrongAnswer (it says what ``status()`` reported before the call)."""
    for extension in (False, True):
        if extension:
            shell.shell.reset(new_session=False)
            shell.run("%load_ext ipyrefresh")
        shell.run(PRELUDE)
        if not extension:
            shell.run("from autograd import grad")
        for step in steps:
            if isinstance(step, str):
                shell.run(textwrap.dedent(step))
                continue
            for k in range(step.times):
                what = f"call {k + 1} of {step.call}"
                reported = states(shell, handle) if extension else []
                got, want = shell.run(f"({step.call}), ({step.oracle})")
                if not extension:
                    assert_same(got, want, f"plain autograd, {what}")
                elif d := diff(got, want):
                    raise WrongAnswer(f"{what}: status() said {reported}, then: {d}")


def test_local_constant_changed_in_place_between_uses(bare_shell: Shell) -> None:
    """f makes a constant array, uses it, changes one element, uses it again."""
    notebook(
        bare_shell,
        """
        def f(x):
            c = onp.ones(3)
            a = np.sin(x * c)
            c[0] = 5.0
            return np.sum(a) + np.sum(np.sin(x * c))
        df = grad(f)
        x = onp.array([0.3, 0.5, 0.7])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 3),
    )


def test_branch_on_local_threshold_changed_after_the_comparison(bare_shell: Shell) -> None:
    """f branches on ``sum(x) > t`` for a local array t, then reuses t for other values."""
    notebook(
        bare_shell,
        """
        def f(x):
            t = onp.zeros(1)
            big = np.sum(x) > t
            t[0] = -5.0
            if big[0]:
                return np.sum(x ** 2)
            return np.sum(np.sin(x))
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 2),
        Ask("df(-x)", "autograd.grad(f)(-x)", 2),
    )


def test_tuple_index_arguments_changed_in_place(bare_shell: Shell) -> None:
    """The caller reuses its index buffer, then passes new arrays equal to the first ones."""
    notebook(
        bare_shell,
        """
        def f(W, i, j):
            return np.sum(np.sin(W[i, j]) ** 2)
        df = grad(f)
        W = onp.arange(12.0).reshape(3, 4) / 10
        ii = onp.array([0, 1]); jj = onp.array([2, 3])
        """,
        Ask("df(W, ii, jj)", "autograd.grad(f)(W, ii, jj)", 2),
        "ii[0] = 2",
        Ask(
            "df(W, onp.array([0, 1]), onp.array([2, 3]))",
            "autograd.grad(f)(W, onp.array([0, 1]), onp.array([2, 3]))",
            2,
        ),
    )


def test_list_argument_changed_in_place_before_the_replay_is_generated(bare_shell: Shell) -> None:
    """The caller changes its list in place after the first call, then passes an equal list."""
    notebook(
        bare_shell,
        """
        def f(x, L):
            return np.sum(np.sin(x * L))
        df = grad(f)
        x = onp.array([0.3, 0.5])
        L = [1.0, 2.0]
        """,
        Ask("df(x, L)", "autograd.grad(f)(x, L)"),
        "L[0] = 5.0",
        Ask("df(x, [1.0, 2.0])", "autograd.grad(f)(x, [1.0, 2.0])", 2),
    )


def test_global_list_rebound_to_an_equal_list_old_one_changed(bare_shell: Shell) -> None:
    """f reads a global list; it is rebound to an equal copy and the old list is reused."""
    notebook(
        bare_shell,
        """
        G = [1.0, 2.0]
        def f(x):
            return np.sum(np.sin(x * G))
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)"),
        "old = G; G = [1.0, 2.0]; old[0] = 7.0",
        Ask("df(x)", "autograd.grad(f)(x)", 2),
    )


def test_global_deque_rebound_to_an_equal_deque_old_one_changed(bare_shell: Shell) -> None:
    """After the replay is compiled, the global deque f reads is rebound to an equal one and
    the old one is changed through another reference."""
    notebook(
        bare_shell,
        """
        import collections
        DQ = collections.deque([1.0, 2.0])
        def f(x):
            return np.sum(np.sin(x * DQ))
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 2),
        "old = DQ; DQ = collections.deque([1.0, 2.0]); old[0] = 7.0",
        Ask("df(x)", "autograd.grad(f)(x)", 2),
    )


def test_parameter_list_grown_in_place_then_reinitialised(bare_shell: Shell) -> None:
    """The user appends a layer to the parameter list, then re-runs the init cell."""
    notebook(
        bare_shell,
        """
        def init():
            return [onp.array([0.3, 0.5]), onp.array([0.6, 1.0])]
        def loss(p):
            return np.sum(p[0] * p[1] ** 2)
        df = grad(loss)
        params = init()
        """,
        Ask("df(params)", "autograd.grad(loss)(params)"),
        "params.append(onp.array([0.9, 1.5]))",
        "params = init()",
        Ask("df(params)", "autograd.grad(loss)(params)", 2),
    )


def test_global_array_perturbed_and_restored_inside_f(bare_shell: Shell) -> None:
    """f adds to a global parameter, computes with it, and subtracts again."""
    notebook(
        bare_shell,
        """
        P = onp.array([1.0, 2.0])
        def f(x):
            P[0] += 0.5
            y = np.sum(np.sin(x * P))
            P[0] -= 0.5
            return y
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 3),
    )


def test_primitive_keyerror_caught_as_a_fallback(bare_shell: Shell) -> None:
    """f looks x up in a table through a primitive, with a fallback outside the table."""
    notebook(
        bare_shell,
        """
        from autograd.extend import primitive, defvjp
        TABLE = {0: 1.0, 1: 2.0, 2: 3.0}
        @primitive
        def lookup(x):
            return x * TABLE[int(x * 10)]
        defvjp(lookup, lambda ans, x: lambda g: g * TABLE[int(x * 10)])
        def f(x):
            try:
                return lookup(x) ** 2
            except KeyError:
                return x * 0.5
        df = grad(f)
        """,
        Ask("df(0.5)", "autograd.grad(f)(0.5)", 2),
        Ask("df(0.15)", "autograd.grad(f)(0.15)", 2),
    )


# -- hunt 15: what the first checks left out ----------------------------------------------

#: A local constant of another kind, changed between two uses (each: its type, made).
LOCAL_KINDS = {
    "deque": "collections.deque([1.0, 1.0])",
    "array.array": "array.array('d', [1.0, 1.0])",
    "list of 300": "[1.0] * 300",
    "ndarray subclass": "onp.ones(2).view(Sub)",
}


@pytest.mark.parametrize("kind", list(LOCAL_KINDS))
def test_local_constants_of_every_kind_changed_between_uses(bare_shell: Shell, kind: str) -> None:
    size = 300 if kind == "list of 300" else 2
    notebook(
        bare_shell,
        f"""
        import array, collections
        class Sub(onp.ndarray):  # (its results plain arrays, as autograd needs)
            __array_priority__ = -10
            def __array_wrap__(self, arr, context=None, return_scalar=False):
                return arr[()] if return_scalar else onp.asarray(arr)
        def f(x):
            c = {LOCAL_KINDS[kind]}
            a = np.sin(x * c)
            c[0] = 5.0
            return np.sum(a) + np.sum(np.sin(x * c))
        df = grad(f)
        x = onp.linspace(0.3, 0.5, {size})
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 3),
    )


def test_object_a_user_primitive_reads_changed_between_uses(bare_shell: Shell) -> None:
    notebook(
        bare_shell,
        """
        from autograd.extend import primitive, defvjp
        class Cfg:
            def __init__(self, k): self.k = k
        @primitive
        def scale(x, cfg): return x * cfg.k
        defvjp(scale, lambda ans, x, cfg: lambda g: g * cfg.k)
        def f(x):
            c = Cfg(1.0)
            a = np.sin(scale(x, c))
            c.k = 5.0
            return np.sum(a) + np.sum(np.sin(scale(x, c)))
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 3),
    )


def test_user_primitive_changing_its_workspace_in_place(bare_shell: Shell) -> None:
    """A warm-start buffer the primitive updates: a fresh one at every call of f."""
    notebook(
        bare_shell,
        """
        from autograd.extend import primitive, defvjp
        @primitive
        def acc(x, buf):
            buf += 1.0
            return x * buf
        defvjp(acc, lambda ans, x, buf: lambda g: g * buf)
        def f(x):
            return np.sum(np.sin(acc(x, onp.ones(2))))
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 4),
    )


@pytest.mark.parametrize(
    "made, change",
    [
        ("collections.deque([1.0, 2.0])", "a[0] = 7.0"),
        ("array.array('d', [1.0, 2.0])", "a[0] = 7.0"),
        ("[[[[[1.0, 2.0]]]]]", "a[0][0][0][0][0] = 7.0"),
    ],
)
def test_arguments_of_every_kind_changed_before_the_replay(
    bare_shell: Shell, made: str, change: str
) -> None:
    """The caller changes its argument after the first call, then passes an equal new one."""
    notebook(
        bare_shell,
        f"""
        import array, collections
        def g(x, a):
            return np.sum(np.sin(x * a))
        df = grad(g)
        x = onp.array([0.3, 0.5])
        a = {made}
        """,
        Ask("df(x, a)", "autograd.grad(g)(x, a)"),
        change,
        Ask(f"df(x, {made})", f"autograd.grad(g)(x, {made})", 3),
    )


def test_array_over_a_buffer_global_rebound_to_an_equal_copy(bare_shell: Shell) -> None:
    notebook(
        bare_shell,
        """
        import struct
        BUF = bytearray(onp.array([1.0, 2.0]).tobytes())
        def f(x):
            return np.sum(np.sin(x * onp.frombuffer(BUF, dtype=onp.float64)))
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 2),
        "old = BUF; BUF = bytearray(old); old[0:8] = struct.pack('d', 7.0)",
        Ask("df(x)", "autograd.grad(f)(x)", 3),
    )


# -- container subclasses (an OrderedDict, a namedtuple, a user's dict class) --------------

#: Setup shared by the subclass cases: a user primitive that reads a container's item, and
#: the subclasses (each: how to make one holding ``w``, how to change ``w`` in place).
SUBCLASS_SETUP = """
import collections
from autograd.extend import primitive, defvjp
@primitive
def scale(x, box):
    return x * box[0] if isinstance(box, (list, tuple)) else x * box['w']
def item(box):
    return box[0] if isinstance(box, (list, tuple)) else box['w']
defvjp(scale, lambda ans, x, box: lambda g: g * item(box))
class Bag(dict):
    pass
class Row(list):
    pass
Pair = collections.namedtuple('Pair', 'w v')
"""
SUBCLASSES = {
    "OrderedDict": ("collections.OrderedDict(w=onp.ones(2))", "c['w'] = onp.full(2, 5.0)"),
    "defaultdict": ("collections.defaultdict(float, w=onp.ones(2))", "c['w'] = onp.full(2, 5.0)"),
    "dict subclass": ("Bag(w=onp.ones(2))", "c['w'] = onp.full(2, 5.0)"),
    "list subclass": ("Row([onp.ones(2)])", "c[0] = onp.full(2, 5.0)"),
    "namedtuple of a list": ("Pair([1.0, 1.0], 0)", "c.w[0] = 5.0"),
}


@pytest.mark.parametrize("kind", list(SUBCLASSES))
def test_local_container_subclass_changed_after_its_use(bare_shell: Shell, kind: str) -> None:
    """The primitive's forward value comes from the first state, the replay must not see
    the second: ``sum(y * y)`` makes the gradient depend on the forward value."""
    made, change = SUBCLASSES[kind]
    notebook(
        bare_shell,
        SUBCLASS_SETUP,
        f"""
        def f(x):
            c = {made}
            y = scale(x, c)
            {change}
            return np.sum(y * y)
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 4),
    )


@pytest.mark.parametrize("kind", ["OrderedDict", "dict subclass", "list subclass"])
def test_global_container_subclass_rebound_to_an_equal_one_old_one_changed(
    bare_shell: Shell, kind: str
) -> None:
    """After the replay is compiled, the global is rebound to an equal container and the
    old one is changed through another name: the replay must not hold the old one."""
    made, change = SUBCLASSES[kind]
    notebook(
        bare_shell,
        SUBCLASS_SETUP,
        f"""
        C = {made}
        def f(x):
            return np.sum(scale(x, C) ** 2)
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 2),
        f"c = C; C = {made}; {change}",
        Ask("df(x)", "autograd.grad(f)(x)", 2),
    )


def test_global_namedtuple_of_a_list_rebound_to_an_equal_one_old_one_changed(
    bare_shell: Shell,
) -> None:
    """The replay must hold its own copy of a namedtuple's mutable members too: the global
    is rebound to an equal namedtuple and the old one's list changed through another name."""
    notebook(
        bare_shell,
        SUBCLASS_SETUP,
        """
        C = Pair([1.0, 2.0], 0)
        def f(x):
            return np.sum(scale(x, C) ** 2)
        df = grad(f)
        x = onp.array([0.3, 0.5])
        """,
        Ask("df(x)", "autograd.grad(f)(x)", 2),
        "c = C; C = Pair([1.0, 2.0], 0); c.w[0] = 7.0",
        Ask("df(x)", "autograd.grad(f)(x)", 2),
    )
