from typing import Any

from . import numpy_boxes as numpy_boxes
from . import numpy_vjps as numpy_vjps
from . import numpy_wrapper as numpy_wrapper

def __getattr__(name: str) -> Any: ...
