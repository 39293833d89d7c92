"""``kiln-bench --workload llm`` in its quick form: the ONNX Runtime peer's
export with past inputs and the greedy loop around it give eager's tokens,
and the table has every row (kiln's own generation is tested in test/python/lm)."""

from kiln.bench import llm


def test_quick_llm_rows_agree_with_eager():
    result = llm.run(quick=True, peers=["eager", "onnxruntime"], timeout_s=600, log=lambda m: None)
    for name, peer in result["peers"].items():
        assert "error" not in peer, f"{name}: {peer.get('error')}"
        assert set(peer["ttft_s"]) == set(llm.QUICK.prompts)
        for b in llm.QUICK.batches:
            row = peer["decode"][b]
            assert row["tokens_per_s"] > 0 and row["p95_ms"] >= row["p50_ms"] > 0
            assert len(row["tokens"]) == b and len(row["tokens"][0]) == llm.QUICK.new_tokens
            assert row["agree_with_eager"] == 1.0, name
    table = llm.markdown(result)
    assert "TTFT ms, prompt 32, B=1" in table and "decode tok/s, B=3" in table and "peak RSS" in table
    for peer in result["peers"].values():  # each peer's own memory: its peak over the model it built
        assert 0 < peer["model_rss_mb"] <= peer["peak_rss_mb"]
    assert "| peak RSS over the built torch model MiB |" in table
    if result.get("stream_gbps"):  # probed before the peers and after each, the best kept
        assert len(result["stream_gbps_probes"]) == 3 and result["stream_gbps"] == max(result["stream_gbps_probes"])
        assert all(v > 0 for v in result["floor_tokens_per_s"].values())
