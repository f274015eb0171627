"""The fla RotaryEmbedding probe: its host-side decision, then the real releases.

The release tests run the probe as the doctor does (a child process, the result line read by the
runner) in cached venvs with torch 2.13.0 CPU, so fla's kernel runs under the Triton interpreter.
fla runs RotaryEmbedding on the CPU only from 0.5.1; 0.5.2 no longer imports under triton 3.9.0
(an autotune key that is not a kernel argument), so its affected run uses triton 3.8.0.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from attn_doctor.probes.catalogue import probes_for_rule
from attn_doctor.probes.fla_rotary import RULE, Launch, guarded_copy, overrun, verdict
from attn_doctor.probes.observation import ProbeVerdict
from tests.release_venvs import probe_in, release_venv, run_python

[PROBE] = probes_for_rule(RULE)
TIMEOUT_S = 120.0
CALL = "RotaryEmbedding(dim=256) on q, k [2, 64, 4, 64] (head_dim 64, cpu)"


def test_the_kernel_reaches_past_the_head_only_when_the_rotary_width_exceeds_it() -> None:
    assert overrun(head_dim=64, rotary_half=128) == 192  # dim = 4 heads x 64
    assert overrun(head_dim=64, rotary_half=32) == 0  # dim = head_dim
    assert overrun(head_dim=64, rotary_half=16) == 0  # partial rotary
    assert overrun(head_dim=64, rotary_half=33) == 2


def test_a_launch_past_the_head_is_affected_whatever_the_guard_saw() -> None:
    within = Launch(head_dim=64, rotary_dim=64, stray_stores=0)
    past = Launch(head_dim=64, rotary_dim=256, stray_stores=192)
    affected = verdict("fla 0.5.2", CALL, [within, past])
    assert affected.verdict is ProbeVerdict.AFFECTED
    assert "rotary width 256 > head_dim 64: it addresses 192 elements past each head" in affected.evidence
    assert "192 stores landed past the end of the output" in affected.evidence
    assert verdict("fla x", CALL, [within]).verdict is ProbeVerdict.NOT_AFFECTED
    with pytest.raises(RuntimeError, match="launched no rotary_embedding_kernel"):
        verdict("fla x", CALL, [])


def test_a_guarded_copy_keeps_the_values_and_owns_the_memory_after_them() -> None:
    tensor = torch.randn(2, 3, 4)
    view, buffer = guarded_copy(tensor, guard=5, fill=float("nan"))
    assert torch.equal(view, tensor) and view.is_contiguous()
    assert view.data_ptr() == buffer.data_ptr() and buffer.numel() == tensor.numel() + 5
    assert buffer[tensor.numel() :].isnan().all()


RELEASES = [
    pytest.param(
        ("flash-linear-attention==0.6.0", "triton==3.9.0"),
        ProbeVerdict.NOT_AFFECTED,
        f"fla 0.6.0 rejected {CALL} with a clear error: AssertionError: Rotary dimension must not exceed "
        "head dimension, got rotary_dim=256 and head_dim=64",
        id="0.6.0",
    ),
    pytest.param(
        ("flash-linear-attention==0.5.2", "triton==3.8.0"),
        ProbeVerdict.AFFECTED,
        f"fla 0.5.2 accepted {CALL} and launched rotary_embedding_kernel with rotary width 256 > head_dim "
        "64: it addresses 192 elements past each head, and 192 stores landed past the end of the output "
        "(guard region)",
        id="0.5.2",
    ),
    pytest.param(
        ("flash-linear-attention==0.5.2", "triton==3.9.0"),
        ProbeVerdict.SKIPPED,
        "fla does not import here: ValueError: key contains names that are not kernel arguments: BT",
        id="0.5.2-triton-3.9.0",
    ),
    pytest.param(
        ("fla-core==0.3.2", "triton==3.5.1", "numpy"),
        ProbeVerdict.SKIPPED,
        "fla 0.3.2 cannot run RotaryEmbedding(dim=head_dim) on the cpu: AttributeError: module "
        "'torch.cpu' has no attribute 'device'",
        id="fla-core-0.3.2",
    ),
    pytest.param(
        ("fla-core==0.3.2", "triton==3.5.1"),
        ProbeVerdict.SKIPPED,
        "no GPU, and the Triton interpreter that would run fla's kernel on the CPU needs numpy",
        id="fla-core-0.3.2-no-numpy",
    ),
]


@pytest.mark.releases
@pytest.mark.parametrize(("requirements", "expected", "evidence"), RELEASES)
def test_real_releases(requirements: tuple[str, ...], expected: ProbeVerdict, evidence: str) -> None:
    with release_venv(*requirements) as venv:
        outcome = probe_in(venv, PROBE)
    [observation] = outcome.observations.values()
    assert (observation.verdict, observation.evidence) == (expected, evidence), outcome.stderr[-2000:]


FAITHFUL = textwrap.dedent(
    """
    import importlib, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from attn_doctor.probes.fla_rotary import GuardedKernel

    modules = importlib.import_module("fla.modules")
    rotary = importlib.import_module(modules.RotaryEmbedding.__module__)
    guarded = GuardedKernel(rotary.rotary_embedding_kernel)
    rotary.rotary_embedding_kernel = guarded
    q, k = torch.randn(2, 64, 4, 64), torch.randn(2, 64, 4, 64)
    for dim in (64, 32):
        rope = modules.RotaryEmbedding(dim=dim)
        out, _ = rope(q, k)
        angles = torch.outer(torch.arange(64.0), 1.0 / 10000 ** (torch.arange(0, dim, 2.0) / dim))
        cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
        x1, x2, rest = q[..., : dim // 2], q[..., dim // 2 : dim], q[..., dim:]
        expected = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)
        print(dim, guarded.launches[-1].stray_stores, float((out - expected).abs().max()))
    """
)


@pytest.mark.releases
@pytest.mark.parametrize(
    "requirements",
    [("flash-linear-attention==0.6.0", "triton==3.9.0"), ("flash-linear-attention==0.5.2", "triton==3.8.0")],
    ids=["0.6.0", "0.5.2"],
)
def test_the_guarded_launch_computes_what_fla_computes(requirements: tuple[str, ...]) -> None:
    """With a width that fits, fla's kernel on the guarded copies gives the rotary embedding itself."""
    with release_venv(*requirements) as venv:
        done = run_python(venv, FAITHFUL, timeout_s=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()]
    assert [(dim, stray) for dim, stray, _ in rows] == [("64", "0"), ("32", "0")]
    assert all(float(error) < 1e-5 for _, _, error in rows)
