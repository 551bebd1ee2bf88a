"""/v1/ops: list, search space, fusion analysis (numbers from the spec's own models)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tilewise.kernels.ops import get_op, list_ops
from tilewise.kernels.targets import get_target
from tilewise.types import Shape


def test_list_ops(read_client: TestClient) -> None:
    ops = read_client.get("/v1/ops").json()
    assert [o["name"] for o in ops] == [s.name for s in list_ops()]
    srd = next(o for o in ops if o["name"] == "scale_relu_dropout")
    assert srd["dims"] == ["N"] and srd["dtypes"] == ["float32", "float16"]
    assert srd["version"] == get_op("scale_relu_dropout").version


def test_op_detail_lists_tunables_with_domains(read_client: TestClient) -> None:
    r = read_client.get("/v1/ops/linear_add_gelu?shape=M=512,N=256,K=128&target=ascend910b3")
    assert r.status_code == 200, r.text
    detail = r.json()
    assert detail["dims"] == ["M", "N", "K"] and detail["target"] == "ascend910b3"
    spec, target = get_op("linear_add_gelu"), get_target("ascend910b3")
    expected = spec.tunables(Shape({"M": 512, "N": 256, "K": 128}), "float32", target)
    assert [t["name"] for t in detail["tunables"]] == [t.name for t in expected]
    assert [t["values"] for t in detail["tunables"]] == [list(t.values) for t in expected]
    # Without a shape: every dim 1024.
    default = read_client.get("/v1/ops/scale_relu_dropout").json()
    assert default["shape"] == {"N": 1024}
    compile_time = {t["name"] for t in default["tunables"] if t["compile_time"]}
    assert compile_time == {"bufferNum"}


def test_unknown_op_is_404(read_client: TestClient) -> None:
    for path in ("/v1/ops/nope", "/v1/ops/nope/analysis?shape=N=1", "/v1/tilings/nope?shape=N=1"):
        r = read_client.get(path)
        assert r.status_code == 404, path
        assert "unknown op 'nope'" in r.json()["detail"]


@pytest.mark.parametrize(
    ("op", "shape", "dtype"),
    [
        ("scale_relu_dropout", "N=65536", "float32"),
        ("scale_relu_dropout", "N=1048576", "float16"),
        ("linear_add_gelu", "M=1024,N=1024,K=1024", "float16"),
    ],
)
def test_analysis_numbers_follow_the_traffic_model(
    read_client: TestClient, op: str, shape: str, dtype: str
) -> None:
    r = read_client.get(f"/v1/ops/{op}/analysis?shape={shape}&dtype={dtype}&target=ascend910b1")
    assert r.status_code == 200, r.text
    a = r.json()
    spec, target, parsed = get_op(op), get_target("ascend910b1"), Shape.parse(shape)
    t = spec.traffic(parsed, dtype)
    traffic = a["traffic"]
    assert (traffic["unfused_bytes"], traffic["fused_bytes"]) == (t.unfused_bytes, t.fused_bytes)
    reduction = 100 * (t.unfused_bytes - t.fused_bytes) / t.unfused_bytes
    assert traffic["reduction_pct"] == pytest.approx(reduction)
    assert traffic["worth_fusing"] is (reduction >= 30)
    assert traffic["intensity_fused"] == pytest.approx(t.flops / t.fused_bytes)
    assert traffic["intensity_unfused"] == pytest.approx(t.flops / t.unfused_bytes)

    default = spec.default_tiling(parsed, dtype, target)
    ub = spec.footprint(default, parsed, dtype, target).ub
    assert a["ub"]["default_tiling"] == dict(default)
    assert a["ub"]["bytes"] == ub and a["ub"]["capacity"] == target.ub
    assert a["ub"]["pct"] == pytest.approx(100 * ub / target.ub)
    assert a["ub"]["high"] is (100 * ub / target.ub > 80)

    roof = a["roofline"]
    bandwidth = 32 * 1850e6 * 24  # ddr_rate B/cycle/core × clock × AI cores
    peak = 24 * 16**3 * 2 * 1850e6 / (4 if dtype == "float32" else 1)
    assert roof["bandwidth_gb_s"] == pytest.approx(bandwidth / 1e9)
    assert roof["peak_tflops"] == pytest.approx(peak / 1e12)
    unfused = max(t.unfused_bytes / bandwidth, t.flops / peak)
    fused = max(t.fused_bytes / bandwidth, t.flops / peak)
    assert roof["speedup_lower_bound"] == pytest.approx(unfused / fused)
    assert roof["unfused_time_us"] == pytest.approx(unfused * 1e6)
    assert "estimate" in roof["note"]


def test_scale_relu_dropout_analysis_in_numbers(read_client: TestClient) -> None:
    # N elements of float32: fused reads x and writes y (8N bytes); unfused moves x and y
    # three times plus a byte mask twice (26N): 69.2% less traffic, memory bound.
    a = read_client.get("/v1/ops/scale_relu_dropout/analysis?shape=N=65536").json()
    n = 65536
    assert a["traffic"]["fused_bytes"] == 8 * n and a["traffic"]["unfused_bytes"] == 26 * n
    assert a["traffic"]["reduction_pct"] == pytest.approx(100 * 18 / 26)
    assert a["traffic"]["worth_fusing"] is True
    assert a["roofline"]["bound"] == "memory"
    assert a["roofline"]["speedup_lower_bound"] == pytest.approx(26 / 8)


def test_analysis_bad_query_names_the_field(read_client: TestClient) -> None:
    base = "/v1/ops/scale_relu_dropout/analysis"
    cases = {
        f"{base}?shape=N=0": "shape",
        f"{base}?shape=M=5": "shape",
        f"{base}?shape=N=abc": "shape",
        f"{base}?shape=N=65536&dtype=int8": "dtype",
        f"{base}?shape=N=65536&target=gpu": "target",
        f"{base}": "shape",
    }
    for url, field in cases.items():
        r = read_client.get(url)
        assert r.status_code == 422, url
        assert r.json()["detail"][0]["loc"] == ["query", field], (url, r.json())


def test_every_op_answers_its_space_and_analysis(read_client: TestClient) -> None:
    for spec in list_ops():
        small = {"stride": 1, "pad": 1}  # conv-like dims; everything else 64
        shape = ",".join(f"{d}={small.get(d, 64)}" for d in spec.dims)
        for path in (
            f"/v1/ops/{spec.name}?shape={shape}",
            f"/v1/ops/{spec.name}/analysis?shape={shape}",
        ):
            r = read_client.get(path)
            assert r.status_code == 200, (path, r.text)
