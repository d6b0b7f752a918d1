"""The "tape" compiler: trace once with autograd, replay without boxing.

Modules, one job each:

- ``trace``    -- run the function once under autograd's tracer with our own node type
  and record every primitive call (function, argument values, which arguments came
  from earlier results). Non-differentiable primitives on traced values (comparisons,
  ``floor``, ``argmax``...) and ``bool()`` of a traced value become *guards*. Float
  arguments that are not differentiated (data, minibatches, array defaults) are traced
  too, so whatever the function computes from them is replayed, not baked in.
- ``adjoints`` -- direct adjoint formulas for the common primitives, with broadcasting
  resolved at compile time (shapes are fixed by the cache key).
- ``replay``   -- generate straight-line Python for one tape: forward with raw numpy,
  guards checked as they come, backward with the direct adjoints or autograd's VJP
  makers; single-use values and backward chains are fused into expressions.
- ``compiler`` -- the artifact: a bounded list of variants per cache key, retraces when
  every variant's guards fail, plain autograd past the bound or for what the tape cannot
  represent (reported as ``Built.fallback``); ``last_event`` says what each call did.

Known limits (each falls back or is left to the engine, never answered silently wrong
by the tape itself): random numbers drawn during the trace -> plain autograd; arrays
bound in the function's globals/closure are referenced, so in-place changes of their
*values* are read live and a change of shape/dtype retraces, but a value the function
derives from them with plain numpy (``W * 2``) is a constant of the tape: the engine's
watch on data globals invalidates the entry when such an array changes.
"""
