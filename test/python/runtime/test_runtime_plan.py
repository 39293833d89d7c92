"""The memory plan on a CNN-shaped schedule: valid at every shape, reuse
well below the no-reuse total; and kiln-run --report."""

import itertools
import os

import pytest
import torch

from kiln._mlir import ir
from kiln.context import make_context
from kiln.dialects.dims import evaluate
from kiln.module import parse_module, symbols_of
from kiln.pipelines import Pipeline
from kiln.runtime.arena import ArenaPlan, ArenaPool
from kiln.transforms.plan_memory import plan_memory, read_plan


def _t(c, h):
    return f'!kiln.tensor<["N", {c}, "{h}", "{h}"], f32>'


def cnn_text():
    """conv -> relu -> pool, three times, then a global reduction."""
    lines = [
        '"kiln.symbol"() {sym_name = "N", min = 1 : i64, max = 16 : i64, opt = 4 : i64} : () -> ()',
        '"kiln.symbol"() {sym_name = "H", min = 8 : i64, max = 224 : i64, opt = 64 : i64, multiple_of = 8 : i64} : () -> ()',
        f'func.func @cnn(%x: {_t(3, "H")}, %w0: !kiln.tensor<[8, 3, 3, 3], f32>, %w1: !kiln.tensor<[16, 8, 3, 3], f32>, '
        f'%w2: !kiln.tensor<[32, 16, 3, 3], f32>) -> !kiln.tensor<["N", 32], f32> {{',
    ]
    prev, c, h = "%x", 3, "H"
    for i, (w, co) in enumerate([("%w0", 8), ("%w1", 16), ("%w2", 32)]):
        lines.append(
            f'  %c{i} = "kiln.conv2d"({prev}, {w}) {{pads = array<i64: 1, 1, 1, 1>, operandSegmentSizes = array<i32: 1, 1, 0>}} '
            f': ({_t(c, h)}, !kiln.tensor<[{co}, {c}, 3, 3], f32>) -> {_t(co, h)}'
        )
        lines.append(f'  %r{i} = "kiln.relu"(%c{i}) : ({_t(co, h)}) -> {_t(co, h)}')
        nh = "?"  # the pooled size: kiln-infer-shapes fills it in
        lines.append(
            f'  %p{i} = "kiln.max_pool2d"(%r{i}) {{kernel = array<i64: 2, 2>}} : ({_t(co, h)}) -> {_t(co, nh)}'
        )
        prev, c, h = f"%p{i}", co, nh
    lines.append(
        f'  %g = "kiln.reduce_mean"({prev}) {{axes = array<i64: 2, 3>}} : ({_t(c, h)}) -> !kiln.tensor<["N", 32], f32>'
    )
    lines.append('  return %g : !kiln.tensor<["N", 32], f32>\n}')
    return "\n".join(lines)


@pytest.fixture(scope="module")
def cnn():
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = parse_module(cnn_text())
        # Unpartitioned: every op is a step (kiln-partition would merge the
        # pooled stages, whose kernels cannot recover H from their arguments).
        Pipeline().add("kiln-infer-shapes").add("kiln-plan-memory").run(module)
        schedule, plan = read_plan(module.operation)
        syms = symbols_of(module.operation)
        yield schedule.detached(), plan, syms


def test_plan_is_valid_at_every_corner(cnn):
    schedule, plan, _ = cnn
    arena = ArenaPlan.from_plan(plan)
    assert len(plan.buffers) == 9  # conv, relu, pool x 3; the reduction is the output
    for n, h in itertools.product([1, 3, 16], [8, 40, 224]):
        layout = arena.layout({"N": n, "H": h})
        live = {v: plan.buffers[v]["live"] for v in plan.buffers}
        for a, b in itertools.combinations(plan.buffers, 2):
            (a0, a1), (b0, b1) = live[a], live[b]
            if a1 < b0 or b1 < a0:
                continue  # disjoint lifetimes may share bytes
            (oa, na), (ob, nb) = layout.offsets[a], layout.offsets[b]
            assert oa + na <= ob or ob + nb <= oa, (n, h, a, b)
        for v, (off, nbytes) in layout.offsets.items():
            info = schedule.values[v].info
            elems = 1
            for d in info.dims:
                elems *= evaluate(d, {"N": n, "H": h})
            assert nbytes >= 4 * elems and off + nbytes <= layout.arena_bytes
        # The peak is the first stage's conv and relu, live together: about
        # half of the no-reuse total (16 vs 31.5 H*H*N floats).
        assert layout.arena_bytes * 1.9 < layout.no_reuse_bytes


def test_plan_from_ir_matches_python(cnn):
    schedule, plan, syms = cnn
    again, _ = plan_memory(schedule, syms)
    assert again.buffers == plan.buffers
    assert (again.arena_size, again.no_reuse_size) == (plan.arena_size, plan.no_reuse_size)


def test_layouts_are_cached(cnn):
    _, plan, _ = cnn
    arena = ArenaPlan.from_plan(plan)
    for h in (8, 16, 8, 8, 16):
        arena.layout({"N": 2, "H": h})
    assert arena.evaluations == 2


def test_kiln_run_report(tmp_path, capsys):
    from kiln.tools.kiln_run import main

    src = tmp_path / "m.mlir"
    t = '!kiln.tensor<["B", 8], f32>'
    src.write_text(
        '"kiln.symbol"() {sym_name = "B", min = 1 : i64, max = 64 : i64} : () -> ()\n'
        f'func.func @main(%x: {t}) -> {t} {{\n'
        f'  %0 = "kiln.exp"(%x) : ({t}) -> {t}\n'
        f'  %1 = "kiln.reduce_sum"(%0) {{axes = array<i64: 1>, keepdims = true}} : ({t}) -> !kiln.tensor<["B", 1], f32>\n'
        f'  %2 = "kiln.div"(%0, %1) : ({t}, !kiln.tensor<["B", 1], f32>) -> {t}\n'
        f"  return %2 : {t}\n}}\n"
    )
    assert main([str(src), "--input", "arg0=5x8", "--repeat", "2", "--report"]) == 0
    out = capsys.readouterr().out
    assert "report:\nkernels in schedule: " in out
    assert "fallback ops: 0 (0.0% of ops" in out
    assert "arena at B=5: planned peak" in out
    assert "calls: 3 (2 timed" in out


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds ``address``."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(a, 16) for a in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return []


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="no transparent huge pages on this system")
@pytest.mark.parametrize("switch, advised", [("1", True), ("0", False)])
def test_big_arenas_are_advised_to_huge_pages(monkeypatch, switch, advised):
    from kiln.runtime import arena

    monkeypatch.setenv("KILN_HUGEPAGES", switch)
    # An earlier model's freed memory first: malloc could hand it back with
    # its small pages already faulted in, where advice comes too late.
    junk = torch.ones(16 << 20, dtype=torch.uint8)
    del junk
    pool = ArenaPool()
    buf = pool.acquire(8 << 20)
    assert buf.numel() == 8 << 20
    if advised:  # a fresh mapping from a 2 MiB boundary, advised before its first touch
        assert buf.data_ptr() % (2 << 20) == 0 and "hg" in _vm_flags(buf.data_ptr())
    else:
        assert arena._huge_page_buffer(8 << 20) is None
    buf.fill_(1)  # writable, all of it
    assert int(buf.sum()) == 8 << 20
    pool.release(buf)
