"""Accera's names that schedc keeps (issue 14): MMAShape's members, the nearest NVIDIA shape in
the refusal of an AMD one, ``mma_shape_to_tuple``, the target's shared-memory limits."""

from __future__ import annotations

import pytest

import schedc as acc
from schedc import PlanError, TargetError

from .plans import matmul_arrays

H100 = acc.Target(acc.Target.Model.NVIDIA_H100)
ACCERA_SHAPES = ("M64xN64xK1_B4", "M64xN64xK1_B2", "M32xN32xK2_B1", "M16xN16xK4_B1", "M64xN64xK2_B4",
                 "M64xN64xK2_B2", "M32xN32xK4_B1", "M16xN16xK8_B1", "M64xN64xK4_B4", "M64xN64xK4_B2",
                 "M32xN32xK8_B1", "M16xN16xK16_B1", "M32xN8xK16_B1", "M8xN32xK16_B1")


def test_every_accera_mma_shape_is_a_member():
    names = {s.name for s in acc.MMAShape}
    assert set(ACCERA_SHAPES) <= names
    assert names - set(ACCERA_SHAPES) == {f"M64xN{n}xK{k}_B1" for n in range(8, 257, 8) for k in (16, 8)}  # wgmma
    assert acc.MMAShape.M64xN64xK1_B4.mnk == (64, 64, 1) and acc.MMAShape.M64xN64xK1_B4.blocks == 4


@pytest.mark.parametrize("shape", [s for s in ACCERA_SHAPES if getattr(acc.MMAShape, s) not in
                                   H100.tensor_core_info.supported_shapes])
def test_amd_shapes_are_refused_with_the_nearest_nvidia_shape(shape):
    mma = getattr(acc.MMAShape, shape)
    message = rf"NVIDIA H100 tensor cores have no {shape} \(an AMD MFMA shape\); the nearest shape they have is M"
    with pytest.raises(TargetError, match=message):
        H100.tensor_core_info.compute_tensor_splits(mma)
    nest, _ = matmul_arrays(64, 64, 64, acc.ScalarType.float16, acc.ScalarType.float32)
    i, j, k = nest.get_indices()
    schedule = nest.create_schedule()
    ii, jj, kk = schedule.tile({i: 16, j: 16, k: 16})
    plan = schedule.create_plan(H100)
    with pytest.raises(PlanError, match=message):
        plan.tensorize(indices=(ii, jj, kk), mma_shape=mma)


def test_the_nearest_shape_is_the_closest_in_m_n_and_k():
    info = acc.Target(acc.Target.Model.NVIDIA_V100).tensor_core_info  # no tf32 shape before sm_80
    assert info.missing(acc.MMAShape.M16xN16xK8_B1).endswith("the nearest shape they have is M16xN16xK16_B1")
    assert H100.tensor_core_info.missing(acc.MMAShape.M16xN16xK4_B1).endswith("M16xN16xK8_B1")


def test_mma_shape_to_tuple():
    assert H100.tensor_core_info.mma_shape_to_tuple(acc.MMAShape.M32xN8xK16_B1) == (32, 8, 16)
    with pytest.raises(TargetError, match="mma_shape must be an MMAShape"):
        H100.tensor_core_info.mma_shape_to_tuple("M32xN8xK16_B1")


def test_shared_memory_limits_per_block():
    assert (H100.max_shared_memory_per_block, H100.max_static_shared_memory_per_block) == (232448, 49152)
    a100 = acc.Target(acc.Target.Model.NVIDIA_A100)
    assert a100.max_shared_memory_per_block == 166912
