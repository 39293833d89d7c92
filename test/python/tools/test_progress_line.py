"""The progress line of kiln-compile / kiln-import (kiln.progress).

Deterministic: a fake clock decides what "long" is, the redraw thread is off
(``tick=0``), and the tools' test sets the delay to 0 instead of compiling
something slow.
"""

import io

import pytest

from kiln import progress
from kiln.progress import ProgressLine


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_nothing_before_the_delay_then_a_line_every_interval_off_a_terminal():
    clock, out = Clock(), io.StringIO()
    with ProgressLine("kiln-compile", out, delay=2.0, interval=5.0, clock=clock, tick=0) as line:
        progress.stage("export")
        clock.now += 1.9
        progress.stage("import", detail="torch-mlir FX importer")
        line.tick()
        assert out.getvalue() == ""  # a compile under the delay shows nothing
        clock.now += 0.2
        progress.stage("lowering", 3, 7, detail="kiln-cpu-vectorize, 40 kernel(s)")
        assert out.getvalue() == "kiln-compile: compiling: lowering 3/7 (kiln-cpu-vectorize, 40 kernel(s)) 2 s\n"
        clock.now += 4.0
        progress.stage("LLVM", detail="40 kernels")
        line.tick()  # within the interval: no second line
        clock.now += 1.0
        line.tick()
    assert out.getvalue().splitlines() == [
        "kiln-compile: compiling: lowering 3/7 (kiln-cpu-vectorize, 40 kernel(s)) 2 s",
        "kiln-compile: compiling: LLVM (40 kernels) 7 s",
    ]
    progress.stage("graph passes")  # no longer listening
    assert len(out.getvalue().splitlines()) == 2


def test_one_updating_line_on_a_terminal_cleared_at_the_end():
    clock, out = Clock(), Tty()
    with ProgressLine("kiln-import", out, verb="importing", delay=2.0, clock=clock, tick=0) as line:
        clock.now += 3.0
        progress.stage("export", detail="torch.export")
        clock.now += 1.0
        line.tick()
    assert out.getvalue() == ("\rkiln-import: importing: export (torch.export) 3 s\x1b[K"
                              "\rkiln-import: importing: export (torch.export) 4 s\x1b[K"
                              "\r\x1b[K")


def test_quiet_and_short_compiles_show_nothing():
    clock, out = Clock(), Tty()
    with ProgressLine("kiln-compile", out, enabled=False, delay=0.0, clock=clock, tick=0):
        progress.stage("export")
    with ProgressLine("kiln-compile", out, delay=2.0, clock=clock, tick=0):
        progress.stage("export")
        clock.now += 1.0
        progress.stage("LLVM")
    assert out.getvalue() == ""


def test_the_redraw_thread_starts_and_stops():
    out = io.StringIO()
    line = ProgressLine("kiln-compile", out, delay=1e9, tick=0.01)
    with line:
        progress.stage("export")
    assert not line._thread.is_alive() and out.getvalue() == ""


FACTORY = '''\
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x @ x.transpose(0, 1)) + 0.43


def factory():
    return Model(), (torch.randn(3, 4),), ({0: torch.export.Dim("B", min=1, max=8)},)
'''


@pytest.mark.parametrize("quiet", [False, True])
def test_kiln_compile_shows_the_stages_of_a_long_compile(tmp_path, monkeypatch, capsys, quiet):
    from kiln.tools.kiln_compile import main

    (tmp_path / "progress_factory_43.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))  # a cold cache: the lowering runs
    # Every compile is "long", and off a terminal each stage gets its line.
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)
    argv = ["progress_factory_43:factory", "-o", str(tmp_path / "art")] + (["-q"] if quiet else [])
    assert main(argv) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("kiln-compile: compiling: ")]
    if quiet:
        assert lines == []
        return
    stages = [ln.removeprefix("kiln-compile: compiling: ").rsplit(" ", 2)[0] for ln in lines]
    for want in ("import", "export (torch.export)", "import (torch-mlir FX importer)", "conversion to kiln",
                 "graph passes (kiln-default-cpu)", "partition + memory plan"):
        assert want in stages, stages
    lowering = [s for s in stages if s.startswith("lowering ")]
    from kiln.backends.cpu.lowering import STAGES

    n = len(STAGES)
    assert lowering[0].startswith(f"lowering 1/{n} (kiln-infer-shapes, ") and lowering[-1].startswith(f"lowering {n}/{n} ")
    llvm = [s for s in stages if s.startswith("LLVM (")]
    assert llvm and llvm[0].endswith(" kernels)")
    assert stages.index(llvm[0]) > stages.index(lowering[-1]) and stages[-1] == "runtime setup"


def test_stage_clock_sums_each_stage_of_its_own_thread():
    """StageClock: seconds per stage in the order entered, a stage entered
    twice summed, ``lowering i/n`` as ``lowering``, another thread's
    announcements not counted, nothing counted before the first or after
    the block."""
    import threading

    clock = Clock()
    progress.stage("before")  # nobody listens yet
    with progress.StageClock(clock=clock) as stages:
        progress.stage("import")
        clock.now += 1.0
        progress.stage("export", detail="torch.export")
        clock.now += 10.0
        other = threading.Thread(target=progress.stage, args=("another compile",))
        other.start()
        other.join()
        progress.stage("import", detail="torch-mlir FX importer")
        clock.now += 2.0
        for i in range(3):
            progress.stage("lowering", i + 1, 3, detail="kiln-cpu-vectorize, 4 kernel(s)")
            clock.now += 0.5
    clock.now += 100.0
    progress.stage("after")
    assert stages.seconds == {"import": 3.0, "export": 10.0, "lowering": 1.5}
    assert progress.format_stages(stages.seconds) == "import 3.000 s, export 10.000 s, lowering 1.500 s"


def test_a_compiled_model_reports_its_compile_stages(tmp_path, monkeypatch):
    """report()["compile_stages_s"] and its line: every stage kiln.compile
    went through, cold (lowering, LLVM) and from the kernel cache, within
    the compile time."""
    import torch

    import kiln

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    batch = torch.export.Dim("B", min=1, max=8)
    for cold in (True, False):
        report = kiln.compile(model, (torch.randn(2, 8),), dynamic_shapes=({0: batch},)).report()
        stages = report["compile_stages_s"]
        want = ["import", "export", "conversion to kiln", "graph passes", "partition + memory plan", "kernel cache"]
        want += ["lowering", "LLVM", "runtime setup"] if cold else ["runtime setup"]
        assert list(stages) == want
        # compile_time_s is taken while the runtime is set up
        assert all(s >= 0 for s in stages.values())
        assert sum(stages.values()) - stages["runtime setup"] <= report["compile_time_s"]
        assert "compile stages: import " in str(kiln.runtime.report.format_report(report))
