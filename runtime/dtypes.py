"""The numpy dtype of each kiln dtype name, for the runtime and the converters.

Kept out of the compiler layers (``transforms/``) so that a model loaded
from an artifact (:mod:`kiln.runtime.artifact`) runs without MLIR.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NUMPY_DTYPES"]

#: numpy dtype for each kiln dtype numpy can hold (bf16 has none).
NUMPY_DTYPES = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "ui8": np.uint8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
}
