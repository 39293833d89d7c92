"""Render a benchmark result: a markdown table and a latency-vs-shape plot."""

from __future__ import annotations

from . import ceiling

__all__ = ["markdown", "plot", "targets"]


def _ms(v) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def _s(v) -> str:
    return "—" if v is None else f"{v:.2f}"


def _bf16_targets(e: dict, label: str) -> list[dict]:
    """Issue 38's targets of a row where ``kiln-bf16`` ran: its p50 <= 1.0x
    OpenVINO's bf16 p50, and <= 1 / 1.5 of kiln's own fp32 p50 (1.5x faster)."""
    p50 = {name: s.get("p50_ms") for name, s in e["peers"].items()}
    mine = p50.get("kiln-bf16")
    if not mine:
        return []
    out = []
    for peer, bound, text in (("openvino-bf16", 1.0, "kiln-bf16 <= 1.0x openvino-bf16"),
                              ("kiln", 1 / 1.5, "kiln-bf16 >= 1.5x faster than kiln fp32")):
        other = p50.get(peer)
        ratio = mine / other if other else None
        out.append({"row": label, "target": text, "ratio": ratio, "bound": bound,
                    "met": None if ratio is None else ratio <= bound})
    return out


def targets(result: dict) -> list[dict]:
    """The issue's ratio targets, checked row by row on ``result``: each
    ``{"row", "target", "ratio", "met"}`` (``met`` None when a peer is missing),
    and for a kiln/peer ratio ``rounds``, the lowest and highest per-round
    ratio when the run recorded them, and ``floor_share`` when the run probed
    the machine's ceiling: the row's floor (:func:`~kiln.bench.ceiling.floor_ms`,
    at most the fastest call of any peer) over the time the target allows
    kiln; above 1 no program meets it here."""
    out = []
    for e in result["rows"]:
        r = e.get("ratio_p50", {})
        spread = e.get("ratio_rounds", {})
        label = f"{e['workload']} {e['row']}"
        floor = ceiling.floor_ms((result.get("ceiling") or {}).get("fma_gflops"), e.get("min_gflop"),
                                 e.get("weight_bytes"), e.get("stream_gbps"))
        if floor is not None:  # a call that was faster proves the floor lower (a probe in a slow spell)
            floor = min([floor] + [s["min_ms"] for s in e["peers"].values() if "min_ms" in s])
        kiln_p50 = e["peers"].get("kiln", {}).get("p50_ms")
        if e.get("suite") == "real":
            for check in _real_targets(e, label):
                if floor is not None and check["ratio"] and kiln_p50:
                    check["floor_share"] = floor / (check["bound"] * kiln_p50 / check["ratio"])
                out.append(check)
            out += _bf16_targets(e, label)
            continue
        bounds = [("onnxruntime", 1.0)]
        if e["workload"] in ("mlp", "transformer_block"):
            bounds.append(("onnxruntime", 0.8))
        if e["workload"] == "transformer_block":
            bounds.append(("eager", 0.5))
        for peer, bound in bounds:
            v = r.get(peer)
            check = {"row": label, "target": f"kiln <= {bound}x {peer}", "ratio": v,
                     "met": None if v is None else v <= bound, "rounds": spread.get(peer)}
            if floor is not None and v and kiln_p50:
                # The time the target allows: bound x the peer's time implied by the ratio.
                check["floor_share"] = floor / (bound * kiln_p50 / v)
            out.append(check)
    gemm = {g["n"]: g for g in result.get("gemm", [])}
    if 1024 in gemm:
        ratio = gemm[1024]["kiln_vs_numpy"]
        out.append({"row": "GEMM 1024^3", "target": "kiln >= 0.8x numpy GFLOPS", "ratio": ratio, "met": ratio >= 0.8})
    ov = result.get("overhead")
    if ov:
        out.append({"row": "per-call overhead", "target": "<= 30 us per call", "ratio": ov["fixed_us"],
                    "met": ov["fixed_us"] <= 30})
        out.append({"row": "per-call overhead", "target": "<= 3 us per launch", "ratio": ov["per_launch_us"],
                    "met": ov["per_launch_us"] <= 3})
    for wname, wres in result.get("workloads", {}).items():
        kiln_cold = wres.get("kiln", {}).get("cold_with_export_s")
        ort_cold = wres.get("onnxruntime", {}).get("cold_with_export_s")
        if kiln_cold is not None and ort_cold:  # issue 42: cold <= 2x ONNX Runtime's export + session
            out.append({"row": f"{wname} compile", "target": "cold (export incl.) <= 2x onnxruntime's",
                        "ratio": kiln_cold / ort_cold, "met": kiln_cold <= 2 * ort_cold})
        warm = wres.get("kiln", {}).get("compile_warm_s")
        if warm is not None:
            out.append({"row": f"{wname} compile", "target": "warm compile <= 1 s", "ratio": warm, "met": warm <= 1})
    return out


#: The fp32 peers a real-workload row is held against (the better of them), issue 42.
REAL_RIVALS = ("onnxruntime", "openvino")


def _real_targets(e: dict, label: str) -> list[dict]:
    """Issue 42's targets of a real-workload row: kiln p50 <= 1.0x the better of
    ONNX Runtime and OpenVINO (fp32), <= 0.8x on sequence rows with B * L >= 512.
    kiln/best is the largest of the kiln/peer ratios; ``met`` is None when
    neither peer ran (an unavailable OpenVINO leaves ONNX Runtime alone)."""
    r = e.get("ratio_p50", {})
    rivals = [p for p in REAL_RIVALS if p in r]
    ratio = max((r[p] for p in rivals), default=None)
    spread = e.get("ratio_rounds", {})
    rounds = None
    if rivals and all(p in spread for p in rivals):
        rounds = [max(spread[p][0] for p in rivals), max(spread[p][1] for p in rivals)]
    name = "better of " + " / ".join(rivals) if rivals else "better of onnxruntime / openvino (neither ran)"
    bounds = [1.0] + ([0.8] if (e.get("tokens") or 0) >= 512 else [])
    return [{"row": label, "target": f"kiln <= {b}x {name}", "ratio": ratio, "bound": b,
             "met": None if ratio is None else ratio <= b, "rounds": rounds} for b in bounds]


def markdown(result: dict) -> str:
    """The result as markdown: latency table, kiln facts, compile times, targets."""
    peers = result["peers"]
    lines = [f"kiln-bench run {result['started']} – {result['finished']}"
             f" ({'quick' if result['quick'] else 'full'}, {result['threads']} threads,"
             f" {result['machine'].get('cpu', 'cpu not recorded')},"
             f" load average at start {tuple(round(x, 2) for x in result['machine'].get('load_avg_at_start', ()))},"
             f" at end {tuple(round(x, 2) for x in result['machine'].get('load_avg_at_end', ()))})", ""]
    missing: dict = {}
    for wname, wres in result["workloads"].items():
        for p, info in wres.items():
            if "unavailable" in info:
                missing.setdefault((p, info["unavailable"]), []).append(wname)
    for (p, why), names in missing.items():  # said up front: an "n/a" column alone would read as a failure
        lines += [f"**{p} did not run on {', '.join(names)}: {why}** (its cells read n/a)", ""]
    head = ["workload", "row"]
    for p in peers:
        head += [f"{p} p50 ms", f"{p} p95", f"{p} p99"]
    head += [f"kiln/{p}" for p in peers if p != "kiln"]
    head += ["kiln thr/s", "kiln launches", "kiln arena MiB", "kiln err"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for e in result["rows"]:
        cells = [e["workload"], e["row"]]
        for p in peers:
            s = e["peers"].get(p, {})
            if "p50_ms" in s:
                cells += [_ms(s["p50_ms"]), _ms(s["p95_ms"]), _ms(s["p99_ms"])]
            else:
                cells += ["n/a" if not s or "unavailable" in s else "error", "", ""]
        ratios = e.get("ratio_p50", {})
        cells += [f"{ratios[p]:.2f}" if p in ratios else "—" for p in peers if p != "kiln"]
        k = e["peers"].get("kiln", {})
        arena = k.get("arena_peak_bytes")
        err = k.get("max_abs_err_vs_ref")
        cells += [f"{k['throughput_per_s']:.0f}" if "throughput_per_s" in k else "—",
                  str(k.get("kernel_launches_per_call", "—")),
                  f"{arena / 2**20:.1f}" if isinstance(arena, (int, float)) else "—",
                  f"{err:.1e}" if isinstance(err, float) else str(err if err is not None else "—")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Latencies pool every timed call of a row; the peers of a row run in interleaved rounds (a"
              " burst each, the order rotating), and kiln/peer is the median over rounds of the ratio of the"
              " two p50s within a round, so it can differ from the ratio of the pooled p50s; the targets"
              " below give it with the lowest and highest round's ratio.", ""]
    lines += ["Compile / setup time (s): kiln cold = first compile of the model with an empty kernel cache"
              " (after the once-per-process setup noted on the first workload), warm = the same model compiled"
              " again; onnxruntime = session creation (export excluded); torch.compile = first call of each row.",
              ""]
    with_export = any("cold_with_export_s" in info for wres in result["workloads"].values()
                      for info in wres.values())
    if with_export:
        lines[-1:-1] = ["Cold (export incl.) = everything from the PyTorch model to a runnable one with empty caches:"
                        " kiln's compile (torch.export inside) into an empty kernel cache, ONNX Runtime's ONNX export"
                        " + session, OpenVINO's torch.export + convert_model + compile_model with an empty CACHE_DIR,"
                        " torch.compile's first call into an empty inductor cache; warm = the same again in the same"
                        " process, caches filled (ONNX Runtime: the session again)."]
        lines.append("| workload | peer | cold s | warm s | cold (export incl.) s | notes |")
        lines.append("|---|---|---|---|---|---|")
    else:
        lines.append("| workload | peer | cold s | warm s | notes |")
        lines.append("|---|---|---|---|---|")
    for wname, wres in result["workloads"].items():
        for p in peers:
            info = wres.get(p, {})
            extra = f" {_s(info.get('cold_with_export_s'))} |" if with_export else ""
            if "unavailable" in info:
                lines.append(f"| {wname} | {p} | — | — |{extra} unavailable: {info['unavailable']} |")
                continue
            notes = info.get("error", "")
            if p.startswith("openvino") and "precision" in info:
                notes = notes or "; ".join(filter(None, [f"runs {info['precision']}", info.get("note")]))
            if p == "torch.compile":
                firsts = [f"{e['row']}: {e['peers'][p].get('first_call_s', 0):.1f}" for e in result["rows"]
                          if e["workload"] == wname and "first_call_s" in e["peers"].get(p, {})]
                notes = notes or "first call " + ", ".join(firsts)
            if p == "onnxruntime" and "onnx_export_s" in info:
                how = f" ({info['onnx_exporter']} exporter)" if info.get("onnx_exporter") else ""
                notes = notes or f"export {info['onnx_export_s']:.2f} s{how}"
            if p == "kiln" and info.get("process_setup_s", 0) > 0.5:  # paid by the first workload
                notes = notes or (f"first: {info['process_setup_s']:.1f} s of once-per-process setup (native runtime"
                                  " build, a first compile)")
            lines.append(f"| {wname} | {p} | {_s(info.get('compile_cold_s'))} | {_s(info.get('compile_warm_s'))}"
                         f" |{extra} {notes} |")
    if result.get("gemm"):
        lines += ["", "GEMM (square f32, one kiln compilation with dynamic M, K, N; numpy = its bundled OpenBLAS;"
                  " alternating bursts, kiln/numpy the median of the per-round ratios):", "",
                  "| n | kiln ms | numpy ms | kiln GFLOPS | numpy GFLOPS | kiln/numpy speed |", "|---|---|---|---|---|---|"]
        for g in result["gemm"]:
            lines.append(f"| {g['n']} | {_ms(g['kiln_p50_ms'])} | {_ms(g['numpy_p50_ms'])} | {g['kiln_gflops']:.1f} |"
                         f" {g['numpy_gflops']:.1f} | {g['kiln_vs_numpy']:.2f} |")
    ov = result.get("overhead")
    if ov:
        pts = ", ".join(f"{p['launches']} launches: {p['p50_us']:.1f} µs" for p in ov["points"])
        lines += ["", f"Per-call overhead (tiny [1, 4] chain models, p50): {pts}; fitted"
                  f" {ov['fixed_us']:.1f} µs per call + {ov['per_launch_us']:.2f} µs per launch."]
    top = result.get("ceiling")
    if top:
        rates = ", ".join(f"{e['workload']} {e['row']} {e['weight_bytes'] / 2**20:.1f} MiB at {e['stream_gbps']:.0f}"
                          " GB/s" for e in result["rows"] if e.get("stream_gbps"))
        lines += ["", f"Machine ceiling ({top['threads']} threads, probed in this run): FMA peak"
                  f" {top['fma_gflops']:.0f} GFLOPS; weights streamed (best sweep between a row's rounds)"
                  f" {rates or '(none probed)'}. A row's floor is its unavoidable FLOPs at that peak or its weights"
                  " at that rate, whichever takes longer (and no more than the fastest call any peer made);"
                  " \"floor share\" is the floor over the time a target allows kiln: above 100% no program"
                  " meets the target on this machine."]
    checks = targets(result)
    if checks:
        lines += ["", "| row | target | value | met | floor share |", "|---|---|---|---|---|"]
        for c in checks:
            met = "n/a" if c["met"] is None else ("yes" if c["met"] else "no")
            share = c.get("floor_share")
            if share is not None and share > 1 and c["met"] is False:
                met = "no (out of reach here)"
            if c["ratio"] is None:
                value = "—"
            elif "rounds" in c:  # a kiln/peer ratio, in three places: 0.8001 must not read 0.80 beside "no"
                value = f"{c['ratio']:.3f}"
                if c["rounds"]:
                    value += " (rounds {:.2f}-{:.2f})".format(*c["rounds"])
            else:
                value = f"{c['ratio']:.2f}"
            lines.append(f"| {c['row']} | {c['target']} | {value} | {met} |"
                         f" {'—' if share is None else f'{share:.0%}'} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: str) -> bool:
    """A PNG of p50 latency vs row per workload (log scale), one line per peer.
    Returns False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(dict.fromkeys(e["workload"] for e in result["rows"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.8), squeeze=False)
    for ax, wname in zip(axes[0], names):
        rows = [e for e in result["rows"] if e["workload"] == wname]
        labels = [e["row"] for e in rows]
        for color, p in enumerate(result["peers"]):
            xs, ys = [], []
            for i, e in enumerate(rows):
                s = e["peers"].get(p, {})
                if "p50_ms" in s:
                    xs.append(i)
                    ys.append(s["p50_ms"])
            if xs:
                ax.plot(xs, ys, marker="o", label=p, color=f"C{color}")  # one color per peer in every panel
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_title(wname)
        ax.set_ylabel("p50 latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
