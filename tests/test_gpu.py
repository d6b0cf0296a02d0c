"""The samples and the variant matrix on the GPU, against the float64 reference.

Each test builds (and compiles) its package first, so without a GPU it still checks that the
kernel compiles; it skips at the launch.
"""

from __future__ import annotations

import numpy as np
import pytest

import schedc
from schedc import data
from schedc.reference import reference
from schedc.verify import compare, run_function

from .conftest import SAMPLES, build_sample, require_gpu
from .plans import VARIANTS, build


def run_and_compare(hat_path, convert=None):
    package = schedc.load(hat_path)
    for fn in package.functions.values():
        if convert is None:
            reports = run_function(fn, seed=7)
            assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))
            continue
        arrays = data.inputs(fn.kernel.buffers, seed=7)
        outputs = data.inputs(fn.kernel.buffers, seed=7)  # the same values, in the same layouts
        device = {name: convert(a) for name, a in outputs.items()}
        fn(*(device[b.name] for b in fn.kernel.params))
        outputs = {name: _to_numpy(t) for name, t in device.items()}
        expected, touched = reference(fn.model, arrays)
        reports = compare(fn.model, outputs, expected, touched)
        assert reports and all(r.passed for r in reports), "\n".join(map(str, reports))


def _to_numpy(tensor):
    import torch

    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return tensor.cpu().numpy()


def _torch(array: np.ndarray):
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).cuda()
    strides = tuple(s // array.itemsize for s in array.strides)
    t = torch.from_numpy(np.ascontiguousarray(array)).cuda()
    if not array.flags.c_contiguous:  # keep the layout the function expects
        t = torch.empty_strided(array.shape, strides, dtype=t.dtype, device="cuda").copy_(t)
    return t


@pytest.mark.gpu
@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_with_numpy_arrays(sample, tmp_path):
    hat_path = build_sample(sample, tmp_path)
    require_gpu()
    run_and_compare(hat_path)


@pytest.mark.gpu
@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_with_torch_arrays(sample, tmp_path):
    hat_path = build_sample(sample, tmp_path)
    require_gpu()
    pytest.importorskip("torch")
    run_and_compare(hat_path, convert=_torch)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_on_gpu(variant, tmp_path):
    make, _ = VARIANTS[variant]
    plan, args = make()
    hat_path = build(plan, args, variant, tmp_path)
    require_gpu()
    run_and_compare(hat_path)
    if variant in ("bf16_set_scale", "fp16_colmajor_b"):
        pytest.importorskip("torch")
        run_and_compare(hat_path, convert=_torch)
