"""kiln-opt with kernels registered from user code (for kiln-select-kernels' lit test).

Registers a CPU kernel for ``kiln.softmax`` (f32 only), one for
``kiln.layer_norm`` that applies only to a last axis of 8, a CUDA kernel
for ``kiln.matmul`` (which the CPU selection must ignore) and a
decomposition of ``kiln.silu``, then runs
``kiln-opt`` with the given arguments.
"""

import sys

import kiln
from kiln.tools.kiln_opt import main


def _never_called(inputs, outputs, binding):  # the lit test only looks at the IR
    raise AssertionError("not run in a lit test")


kiln.register_kernel("kiln.softmax", _never_called, device="cpu", dtypes=["f32"], name="my_softmax")
kiln.register_kernel("kiln.layer_norm", _never_called, device="cpu", name="my_norm8",
                     applies=lambda op: str(op.operation.operands[0].type).endswith(", 8], f32>"))
kiln.register_kernel("kiln.matmul", _never_called, device="cuda", name="my_cuda_matmul")


@kiln.register_decomposition("kiln.silu")
def _silu(cx):  # x * sigmoid(x), built with the importer's OpContext over the kiln op
    x = cx.tensor(0)
    return cx.build("mul", x, cx.build("sigmoid", x))


sys.exit(main(sys.argv[1:]))
