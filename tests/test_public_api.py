"""The public surface of each package is what its __all__ says, and nothing it lists is missing."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "tilewise": {
        "Answer",
        "BackendError",
        "ConfigError",
        "InputError",
        "SchemaError",
        "StoreError",
        "TableFormatError",
        "TilewiseError",
        "TilingTable",
        "__version__",
        "load_ops",
    },
    "tilewise.runtime": {"Answer", "Miss", "Rule", "Source", "TilingTable"},
    "tilewise.launch": {"Choice", "Ops", "load_ops"},
    "tilewise.manifest": {
        "BUDGET_FLOOR",
        "Manifest",
        "ManifestEntry",
        "ManifestError",
        "ShapeItem",
        "WorkloadGroup",
        "assign_budgets",
        "load_manifest",
        "manifest_of",
        "parse_manifest",
        "parse_text",
        "spread_budget",
        "where",
    },
    "tilewise.torch": {
        "OPERATORS",
        "ROW_DIMS",
        "ConvBnAct",
        "LinearGelu",
        "LlamaMLP",
        "ScaleReluDropout",
        "current_ops",
        "fuse_conv_bn_act",
        "use_table",
    },
    "tilewise.kernels.ops": {
        "CARRY_C_HELPERS",
        "OPS",
        "Bound",
        "Buffer",
        "Carry",
        "CarryRules",
        "Check",
        "Footprint",
        "GmArg",
        "OpSpec",
        "Parameter",
        "StructField",
        "Traffic",
        "Tunable",
        "c_dim",
        "get_op",
        "list_ops",
    },
    "tilewise.kernels.backends": {
        "BACKENDS",
        "Backend",
        "BuildLimits",
        "BuildResult",
        "MeasureOptions",
        "PlanVerdict",
        "Prediction",
        "RunResult",
        "check_plan",
        "create_backend",
        "current_toolchain",
        "current_toolchain_id",
        "current_toolchain_ids",
        "predict",
        "rank",
    },
    "tilewise.search": {
        "STRATEGIES",
        "Attempt",
        "Budget",
        "JobTag",
        "Measured",
        "Measurer",
        "Progress",
        "ReplayResult",
        "ReplayRun",
        "ReplaySpace",
        "SearchSpace",
        "SurrogateSampler",
        "TuneResult",
        "Tuner",
        "cell_measurer",
        "make_sampler",
        "replay_search",
    },
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_all_is_pinned(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == PUBLIC[module]
    for name in mod.__all__:
        assert hasattr(mod, name), name
