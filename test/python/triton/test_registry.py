"""The kernel registry: candidates, heuristic and measured choice, user kernels, cached choices."""

import pytest
import torch
from helpers import check, compile_text, symbols, t

import kiln
from kiln.backends.cache import KernelCache
from kiln.backends.registry import REGISTRY, KernelRegistry, register_kernel, shape_class
from kiln.errors import KilnError

MM = symbols(B=(1, 64, 8)) + f"""
func.func @f(%x: {t("B,32:f32")}, %w: {t("32,24:f32")}) -> {t("B,24:f32")} {{
  %m = "kiln.matmul"(%x, %w) : ({t("B,32:f32")}, {t("32,24:f32")}) -> {t("B,24:f32")}
  return %m : {t("B,24:f32")}
}}"""

SOFTMAX = symbols(B=(1, 64, 8)) + f"""
func.func @f(%x: {t("B,24:f32")}) -> {t("B,24:f32")} {{
  %s = "kiln.softmax"(%x) {{axis = -1 : i64}} : ({t("B,24:f32")}) -> {t("B,24:f32")}
  return %s : {t("B,24:f32")}
}}"""


def spec_of(text):
    return compile_text(text).program.steps[0].spec


def test_candidates_by_op_device_dtype():
    spec = spec_of(MM)
    names = [e.name for e in REGISTRY.candidates(spec, "cuda")]
    assert names == ["triton_matmul", "library_matmul"]  # generated first, library by measurement only
    assert REGISTRY.candidates(spec, "cuda", dtype="i32") == []
    assert shape_class(spec) == "dynamic"
    assert "flash_attention" not in names


def test_heuristic_uses_opt_shape():
    spec = spec_of(MM)
    small = REGISTRY.select(spec, "cuda", {"B": 1})
    large = REGISTRY.select(spec, "cuda", {"B": 4096})
    assert small.how == large.how == "heuristic"
    assert small.config["BM"] == 16 and large.config["BM"] == 128


def test_autotune_measures_every_candidate_and_caches_the_choice(tmp_path):
    kc = KernelCache(tmp_path)
    spec = spec_of(MM)
    choice = REGISTRY.select(spec, "cuda", {"B": 8}, autotune=True, cache=kc, max_configs=2)
    assert choice.how == "autotune"
    assert len(choice.times) == 3  # two triton configs + the library GEMM
    assert choice.times[min(choice.times, key=choice.times.get)] == min(choice.times.values())
    again = REGISTRY.select(spec, "cuda", {"B": 8}, autotune=True, cache=kc, max_configs=2)
    assert again.how == "cache" and again.entry.name == choice.entry.name and again.config == choice.config
    x, w = torch.randn(5, 32), torch.randn(32, 24)
    out = torch.empty(5, 24)
    again.kernel([x, w], [out], {"B": 5})
    check(out, x @ w, "f32")


def test_register_kernel_cpu_function_and_decorator():
    reg = KernelRegistry()
    reg._builtins_loaded = True  # only what this test registers
    calls = []

    @register_kernel("kiln.softmax", device="cpu", dtypes=["f32"], name="torch_softmax", registry=reg,
                     workspace=lambda x: 64, shape_fn=lambda x: x)
    def torch_softmax(inputs, outputs, binding, workspace):
        calls.append(workspace.numel())
        outputs[0].copy_(inputs[0].softmax(-1))

    spec = spec_of(SOFTMAX)
    choice = reg.select(spec, "cpu", {"B": 8})
    assert choice.entry.name == "torch_softmax" and choice.kernel.inputs[0].dims == spec.inputs[0].base.dims
    x = torch.randn(3, 24)
    out = torch.empty(3, 24)
    choice.kernel([x], [out], {"B": 3})
    check(out, x.softmax(-1), "f32")
    assert calls == [64]
    assert reg.candidates(spec, "cuda") == []
    assert kiln.register_kernel is register_kernel


def test_user_kernel_outranks_generated_and_shape_fn_is_checked():
    spec = spec_of(SOFTMAX)

    def wrong_shape(inputs, outputs, binding):
        outputs[0].copy_(inputs[0])

    register_kernel("kiln.softmax", wrong_shape, device="cuda", dtypes=["f32"], name="user_softmax",
                    shape_fn=lambda x: (x[0], 1))
    try:
        with pytest.raises(KilnError, match="shape function of kernel 'user_softmax'"):
            REGISTRY.select(spec, "cuda", {"B": 8})
        register_kernel("kiln.softmax", wrong_shape, device="cuda", dtypes=["f32"], name="user_softmax",
                        shape_fn=lambda x: x)
        assert REGISTRY.select(spec, "cuda", {"B": 8}).entry.name == "user_softmax"
    finally:
        REGISTRY.unregister("user_softmax")
    assert REGISTRY.select(spec, "cuda", {"B": 8}).entry.name == "triton_softmax"


def test_no_candidate_is_a_clear_error():
    spec = spec_of(SOFTMAX)
    with pytest.raises(kiln.UnsupportedError, match="no kernel for 'kiln.softmax' on tpu"):
        REGISTRY.select(spec, "tpu", {"B": 8})
