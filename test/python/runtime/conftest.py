"""Runtime test fixtures: build an executor from kiln IR with the runtime's own pieces.

Generated steps run on a small PyTorch reference interpreter of the kiln ops
these tests use (the CPU backend is tested elsewhere); fallback steps run on
the real :class:`kiln.backends.fallback.FallbackKernel`.
"""

import pytest
import torch

from kiln._mlir import ir
from kiln.backends.fallback_build import fallback_from_op
from kiln.compile_prepare import constant_tensor
from kiln.context import make_context
from kiln.module import parse_module, symbols_of
from kiln.pipelines import Pipeline
from kiln.runtime.contract import InputSpec, ShapeContract
from kiln.runtime.executor import Executor
from kiln.transforms.plan_memory import read_plan

_REF = {
    "kiln.matmul": lambda a, b: a @ b,
    "kiln.add": torch.add,
    "kiln.mul": torch.mul,
    "kiln.sub": torch.sub,
    "kiln.relu": torch.relu,
    "kiln.tanh": torch.tanh,
    "kiln.softmax": lambda x, axis=-1: torch.softmax(x, axis),
    "kiln.max_pool2d": None,
}


class RefKernel:
    """Interprets a kernel function's kiln ops with torch (kernel contract)."""

    def __init__(self, func):
        self.name = ir.StringAttr(func.attributes["sym_name"]).value
        block = func.regions[0].blocks[0]
        self.arg_count = len(block.arguments)
        self.program = []  # (op name, attrs, operand slots, result slots)
        slots = {}
        for i, a in enumerate(block.arguments):
            slots[a.get_name()] = i
        n = self.arg_count
        for op in block.operations:
            op = op.operation
            operands = [slots[v.get_name()] for v in op.operands]
            if op.name == "func.return":
                self.returns = operands
                continue
            attrs = {}
            if op.name == "kiln.constant":
                attrs["value"] = constant_tensor(op)
            if op.name == "kiln.softmax":
                attrs["axis"] = op.opview.attr("axis")
            results = []
            for r in op.results:
                slots[r.get_name()] = n
                results.append(n)
                n += 1
            self.program.append((op.name, attrs, operands, results))

    def __call__(self, inputs, outputs, binding):
        env = dict(enumerate(inputs))
        for name, attrs, operands, results in self.program:
            if name == "kiln.constant":
                env[results[0]] = attrs["value"]
                continue
            env[results[0]] = _REF[name](*[env[o] for o in operands], **attrs)
        for o, r in zip(outputs, self.returns):
            o.copy_(env[r])


def build(text, *, fuse=True, reuse=True, names=None, profiling=False, inline_constants=True):
    """``(executor, contract, ctx)`` for kiln IR text with one public function."""
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = parse_module(text)
        Pipeline().add("kiln-partition", fuse=fuse, inline_constants=inline_constants).add("kiln-plan-memory", reuse=reuse).run(module)
        schedule, plan = read_plan(module.operation)
        kernels = []
        for step in schedule.steps:
            if step.kind == "fallback":
                fb = next(o for o in step.func.regions[0].blocks[0].operations if o.operation.name == "kiln.fallback")
                kernels.append(fallback_from_op(fb, step.name))
            else:
                kernels.append(RefKernel(step.func))
        constants = {vid: constant_tensor(op) for vid, op in schedule.constants.items()}
        syms = symbols_of(module.operation)
        specs = [
            InputSpec((names or {}).get(i, f"arg{i}"), tuple(schedule.values[v].info.dims), str(schedule.values[v].info.dtype))
            for i, v in enumerate(schedule.inputs)
        ]
        from kiln.runtime.report import Metrics

        ex = Executor(schedule, plan, kernels, constants, metrics=Metrics(profiling))
        module_text = str(module)
    return ex, ShapeContract(specs, syms), module_text, plan


@pytest.fixture
def build_executor():
    """The :func:`build` helper, as a fixture (test modules import nothing local)."""
    return build
