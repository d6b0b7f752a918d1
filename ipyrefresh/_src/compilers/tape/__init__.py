"""The "tape" compiler: record autograd's first run, replay it as generated numpy code.

- ``record``   -- autograd's transforms over a ``VJPNode`` subclass that logs each
  primitive call and the guards (non-differentiable results, ``bool()``) of one run;
- ``patches``  -- the two hooks that logging needs in autograd, installed on first use;
- ``adjoints`` -- autograd's VJPs for common primitives as expressions (same bits);
- ``emit``     -- liveness, autograd's backward order, the backward plan, code;
- ``compiler`` -- the compiler and its variant (compiled at the second call).
"""
