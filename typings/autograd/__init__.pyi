# Types for the parts of autograd ipyrefresh uses (autograd ships none).
from collections.abc import Callable
from typing import Any

from . import builtins as builtins
from . import core as core
from . import numpy as numpy
from . import tracer as tracer
from . import wrap_util as wrap_util

_Op = Callable[..., Callable[..., Any]]

grad: _Op
value_and_grad: _Op
elementwise_grad: _Op
jacobian: _Op
hessian: _Op
make_vjp: _Op
