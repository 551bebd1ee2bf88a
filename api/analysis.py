"""The fusion analysis of one workload: what fusing saves, from the op's traffic model.

Everything here is a model estimate from the op spec and the target profile, never a measurement:

* traffic: global-memory bytes of the fused kernel against the same op as separate kernels
  (``OpSpec.traffic``). Fusion is *worth it* when it removes at least 30% of the traffic.
* UB: the bytes the op's default tiling allocates per core, as a share of the target's UB;
  above 80% leaves little room for double buffering or larger tiles.
* roofline: time = max(bytes / bandwidth, flops / peak) with bandwidth = ddr_rate × clock ×
  AI cores (CANN's bytes/cycle/core) and peak = the cube's, AI cores × 16³ MACs × 2 × clock
  (a quarter of that for float32). The *speedup lower bound* is unfused time / fused time. It is
  a lower bound of what the model promises because it leaves out what fusion saves besides
  traffic: the launches of the extra kernels and the intermediates' cache pressure. For a
  memory-bound op it is unfused_bytes / fused_bytes, capped where compute takes over.
"""

from __future__ import annotations

from tilewise.api.schemas import AnalysisPublic, RooflinePublic, TrafficPublic, UbPublic
from tilewise.kernels.request import WorkloadRequest
from tilewise.kernels.targets import TargetProfile
from tilewise.types import DTYPE_BYTES

WORTH_FUSING_PCT = 30.0
UB_HIGH_PCT = 80.0
CUBE_MACS = 16**3

NOTE = (
    "model estimate (roofline), not a measurement: time = max(bytes / bandwidth, flops / peak); "
    "lower bound = unfused time / fused time, ignoring saved kernel launches"
)


def bandwidth(target: TargetProfile) -> float:
    """Bytes per second between global memory and the AI cores."""
    return target.ddr_rate * target.freq_mhz * 1e6 * target.cube_cores


def peak_flops(target: TargetProfile, dtype: str) -> float:
    """The cube's peak flops per second (float32 runs at a quarter of float16 on 910B)."""
    fp16 = target.cube_cores * CUBE_MACS * 2 * target.freq_mhz * 1e6
    return fp16 / 4 if DTYPE_BYTES[dtype] == 4 else fp16


def analyse(what: WorkloadRequest) -> AnalysisPublic:
    spec, shape, dtype, target = what.spec, what.shape, what.dtype, what.target
    t = spec.traffic(shape, dtype)
    reduction = 100.0 * (1.0 - t.fused_bytes / t.unfused_bytes) if t.unfused_bytes else 0.0
    traffic = TrafficPublic(
        unfused_bytes=t.unfused_bytes,
        fused_bytes=t.fused_bytes,
        saved_bytes=t.unfused_bytes - t.fused_bytes,
        reduction_pct=reduction,
        worth_fusing=reduction >= WORTH_FUSING_PCT,
        unfused_kernels=t.unfused_kernels,
        flops=t.flops,
        intensity_unfused=t.flops / t.unfused_bytes if t.unfused_bytes else 0.0,
        intensity_fused=t.flops / t.fused_bytes if t.fused_bytes else 0.0,
    )

    default = spec.default_tiling(shape, dtype, target)
    ub_bytes = spec.footprint(default, shape, dtype, target).ub
    ub_pct = 100.0 * ub_bytes / target.ub
    ub = UbPublic(
        default_tiling=dict(default),
        bytes=ub_bytes,
        capacity=target.ub,
        usable=target.ub_usable(mix=spec.mix),
        pct=ub_pct,
        high=ub_pct > UB_HIGH_PCT,
    )

    bw, peak = bandwidth(target), peak_flops(target, dtype)
    compute_s = t.flops / peak
    unfused_s = max(t.unfused_bytes / bw, compute_s)
    fused_s = max(t.fused_bytes / bw, compute_s)
    roofline = RooflinePublic(
        bandwidth_gb_s=bw / 1e9,
        peak_tflops=peak / 1e12,
        ridge_flops_per_byte=peak / bw,
        bound="memory" if t.fused_bytes / bw >= compute_s else "compute",
        unfused_time_us=unfused_s * 1e6,
        fused_time_us=fused_s * 1e6,
        speedup_lower_bound=unfused_s / fused_s if fused_s else 1.0,
        note=NOTE,
    )
    return AnalysisPublic(
        op=spec.name,
        shape=dict(shape),
        dtype=dtype,
        target=target.name,
        traffic=traffic,
        ub=ub,
        roofline=roofline,
    )
