"""Where the LLaMA MLP block's time goes: CPU time per call, one thread each.

    TILEWISE_RUNNER_THREADS=1 .venv/bin/python bench/models_cpu.py [--tokens 1,16,128,512,2048]
        [--seconds 0.5]

The blocks of ``tilewise bench models`` (same sizes, default tilings: the tunes of that
benchmark keep them) with PyTorch on one thread and the twin's pool on one thread (the
environment variable above), each call's cost as ``time.process_time`` over a loop of at least
``--seconds``, the best of three interleaved rounds. CPU time counts what a call computes and
not the time the process waits for a core, so on a shared, oversubscribed host it says more
about the kernels than wall time (cache interference from the other tenants still moves it by
about 10%). Contenders: the ``swiglu_mlp`` launch alone (the kernel), the torch op, compiled
and eager gate+up (``silu(gate(x)) * up(x)``), down_proj, and the three whole blocks. Prints
one JSON object.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn.functional as F

import tilewise.torch
from tilewise.bench.blocks import HIDDEN, INTERMEDIATE, TOKENS, GateUp, PlainLlamaMLP
from tilewise.bench.machine import machine_info
from tilewise.bench.timing import keep_freed_memory
from tilewise.kernels.ops import get_op
from tilewise.launch._twin import TwinLaunch
from tilewise.runtime import TilingTable


def cpu_ms(fn: Callable[[], object], seconds: float) -> float:
    fn()
    calls, cpu, wall = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall < seconds or calls < 3:
        fn()
        calls += 1
    return (time.process_time() - cpu) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--seconds", type=float, default=0.5)
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)  # inductor's own torch.jit use
    keep_freed_memory()
    torch.set_num_threads(1)
    ops = tilewise.torch.use_table(TilingTable([]))
    torch.manual_seed(0)
    ref = PlainLlamaMLP(HIDDEN, INTERMEDIATE).eval()
    ours = tilewise.torch.LlamaMLP(HIDDEN, INTERMEDIATE).eval()
    ours.load_state_dict(ref.state_dict())
    gate_up, block = torch.compile(GateUp(ref), dynamic=False), torch.compile(ref, dynamic=False)
    wg, wu = ours.gate_proj.weight.t(), ours.up_proj.weight.t()
    spec = get_op("swiglu_mlp")

    pool_threads: set[int] = set()  # one host pool serves every launch

    def contenders(tokens: int) -> dict[str, Callable[[], object]]:
        x = torch.randn(1, tokens, HIDDEN)
        h = torch.randn(1, tokens, INTERMEDIATE)
        arrays = {"x": x.reshape(tokens, HIDDEN).numpy(), "wg": wg.numpy(), "wu": wu.numpy()}
        arrays["out"] = ops.swiglu_mlp(*arrays.values())
        shapes = {n: arrays[n].shape for n in ("x", "wg", "wu")}
        plan = ops._plan(spec, "float32", shapes, {}).launch
        assert isinstance(plan, TwinLaunch)  # a cpu-twin table
        gm = [None if r == "workspace" else arrays[n].ctypes.data for n, r in spec.roles.items()]
        host = plan.host
        pool_threads.add(host.threads)

        # gm holds the arrays' addresses only: the default argument keeps the arrays alive.
        def launch(_arrays: object = arrays) -> None:
            host.launch(plan.variant, gm, plan.workspace, plan.packed, plan.block_dim, plan.limits)

        return {
            "swiglu_mlp_launch": launch,
            "swiglu_mlp_op": lambda: torch.ops.tilewise.swiglu_mlp(x, wg, wu),
            "compile_gate_up": lambda: gate_up(x),
            "eager_gate_up": lambda: F.silu(ref.gate_proj(x)) * ref.up_proj(x),
            "down_proj": lambda: ref.down_proj(h),
            "tilewise_block": lambda: ours(x),
            "compile_block": lambda: block(x),
            "eager_block": lambda: ref(x),
        }

    rows = []
    with torch.inference_mode():
        for tokens in (int(t) for t in args.tokens.split(",")):
            timed = contenders(tokens)
            best = dict.fromkeys(timed, float("inf"))
            for _ in range(3):
                for name, fn in timed.items():
                    best[name] = min(best[name], cpu_ms(fn, args.seconds))
            row = {"tokens": tokens, **{f"{k}_ms": round(v, 3) for k, v in best.items()}}
            row["tilewise_vs_compile"] = round(best["tilewise_block"] / best["compile_block"], 3)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    print(json.dumps({
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
        "machine": machine_info(),
        "hidden": HIDDEN,
        "intermediate": INTERMEDIATE,
        "torch_threads": torch.get_num_threads(),
        "pool_threads": pool_threads.pop(),
        "rows": rows,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
