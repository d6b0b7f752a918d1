"""Comparing answers with autograd's: bit for bit, type and dtype included."""

from __future__ import annotations

from typing import Any

import numpy as onp
import numpy.testing  # (loaded now: numpy loads it lazily, on first use)


def same_result(got: Any, want: Any) -> None:
    """The same types, shapes, dtypes and bits (NaN where autograd has NaN)."""
    if isinstance(want, dict):
        assert type(got) is dict and list(got) == list(want)
        # (keys of the same types: autograd gives back the caller's own key objects)
        assert [type(k) for k in got] == [type(k) for k in want], (list(got), list(want))
        for k in want:
            same_result(got[k], want[k])
        return
    if isinstance(want, tuple | list):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same_result(g, w)
        return
    assert type(got) is type(want), (type(got), type(want))
    assert onp.shape(got) == onp.shape(want)
    assert onp.result_type(got) == onp.result_type(want)
    onp.testing.assert_array_equal(got, want, strict=True)
    # == cannot tell 0.0 from -0.0, nor NaNs by their sign or payload: the bits can.
    kind = onp.result_type(want).kind
    if kind in "fc":
        g, w = onp.asarray(got), onp.asarray(want)
        if g.dtype.type not in (onp.longdouble, onp.clongdouble):
            assert g.tobytes() == w.tobytes(), "bits differ: signs of zero or NaN, or NaNs"
            return
        parts = (onp.real, onp.imag) if kind == "c" else (onp.asarray,)
        for part in parts:  # (a long double's padding bytes are not its bits)
            signs = onp.signbit(part(got)), onp.signbit(part(want))
            onp.testing.assert_array_equal(*signs, err_msg="signs of zero or NaN differ")
