"""GPUs: probed through NVML (ctypes, no import of torch) or nvidia-smi, or named as a target.

No GPU is a fact (``gpu_source="none"``), not an error.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

from attn_doctor.errors import InputError
from attn_doctor.facts.model import Gpu

NVIDIA_SMI_TIMEOUT_S = 5.0

# Marketing names -> compute capability, from NVIDIA's CUDA GPUs table. Longest key first
# matters: "H100" must not be taken for "A100" and "RTX 4090" is looked up before "4090".
KNOWN_GPUS: dict[str, str] = {
    "P100": "6.0",
    "P40": "6.1",
    "P4": "6.1",
    "GTX 1080": "6.1",
    "GTX 1080 TI": "6.1",
    "V100": "7.0",
    "TITAN V": "7.0",
    "T4": "7.5",
    "RTX 2080": "7.5",
    "RTX 2080 TI": "7.5",
    "TITAN RTX": "7.5",
    "QUADRO RTX 8000": "7.5",
    "A100": "8.0",
    "A800": "8.0",
    "A30": "8.0",
    "A10": "8.6",
    "A10G": "8.6",
    "A40": "8.6",
    "A16": "8.6",
    "A2": "8.6",
    "RTX A6000": "8.6",
    "RTX A5000": "8.6",
    "RTX A4000": "8.6",
    "RTX 3090": "8.6",
    "RTX 3090 TI": "8.6",
    "RTX 3080": "8.6",
    "RTX 3070": "8.6",
    "RTX 3060": "8.6",
    "L4": "8.9",
    "L40": "8.9",
    "L40S": "8.9",
    "RTX 6000 ADA": "8.9",
    "RTX 4090": "8.9",
    "RTX 4080": "8.9",
    "RTX 4070": "8.9",
    "RTX 4060": "8.9",
    "H100": "9.0",
    "H800": "9.0",
    "H200": "9.0",
    "H20": "9.0",
    "GH200": "9.0",
    "B200": "10.0",
    "B100": "10.0",
    "GB200": "10.0",
    "B300": "10.3",
    "GB300": "10.3",
    "RTX 5090": "12.0",
    "RTX 5080": "12.0",
    "RTX 5070": "12.0",
    "RTX PRO 6000": "12.0",
}

# Every compute capability NVIDIA has shipped (CUDA GPUs table, CUDA 13 release notes); a target
# outside it is a typo (sm_999, 0.0), not a GPU.
CAPABILITIES = [
    "3.0",
    "3.2",
    "3.5",
    "3.7",
    "5.0",
    "5.2",
    "5.3",
    "6.0",
    "6.1",
    "6.2",
    "7.0",
    "7.2",
    "7.5",
    "8.0",
    "8.6",
    "8.7",
    "8.8",
    "8.9",
    "9.0",
    "10.0",
    "10.1",
    "10.3",
    "11.0",
    "12.0",
    "12.1",
]

_SM_FORM = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})[af]?$", re.I)
_DOTTED_FORM = re.compile(r"^(\d{1,2})\.(\d)$")


def target_gpu(spec: str, source: str = "--gpu") -> Gpu:
    """A target GPU: ``sm_90``, ``sm_90a``, ``90``, ``9.0`` or a name such as ``H100``."""
    text = spec.strip()
    dotted, sm_form = _DOTTED_FORM.match(text), _SM_FORM.match(text)
    if dotted or sm_form:
        digits = f"{dotted[1]}{dotted[2]}" if dotted else sm_form[1]  # type: ignore[index]
        capability = f"{digits[:-1]}.{digits[-1]}"
        if capability not in CAPABILITIES:
            raise InputError(
                f"{source} {spec!r}",
                f"no GPU has compute capability {capability} (known: {', '.join(CAPABILITIES)})",
            )
        return Gpu(name=f"sm_{digits}", compute_capability=capability)
    named = capability_from_name(text)
    if named is None:
        raise InputError(
            f"{source} {spec!r}",
            "not a compute capability (sm_90, 9.0) or a known GPU "
            f"name ({', '.join(sorted(KNOWN_GPUS)[:8])}, ...)",
        )
    return Gpu(name=text, compute_capability=named)


def capability_from_name(name: str) -> str | None:
    """Compute capability of a product name as NVML or a user writes it, if we know it."""
    words = re.sub(r"[^A-Z0-9 ]", " ", name.upper().replace("NVIDIA", "").replace("GEFORCE", ""))
    padded = f" {' '.join(words.split())} "
    for key in sorted(KNOWN_GPUS, key=len, reverse=True):
        if f" {key} " in padded:
            return KNOWN_GPUS[key]
    return None


def probe_gpus() -> tuple[list[Gpu], str]:
    """The GPUs of this machine and how they were found (``nvml``, ``nvidia-smi`` or ``none``)."""
    gpus = _from_nvml()
    if gpus is not None:
        return gpus, "nvml" if gpus else "none"
    gpus = _from_nvidia_smi()
    if gpus is not None:
        return gpus, "nvidia-smi" if gpus else "none"
    return [], "none"


def _from_nvml() -> list[Gpu] | None:
    """None when NVML is not there or fails; the driver library is all this needs."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        driver_buffer = ctypes.create_string_buffer(96)
        nvml.nvmlSystemGetDriverVersion(driver_buffer, 96)
        driver = driver_buffer.value.decode(errors="replace") or None
        gpus = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
                return None
            name_buffer = ctypes.create_string_buffer(96)
            nvml.nvmlDeviceGetName(handle, name_buffer, 96)
            major, minor = ctypes.c_int(), ctypes.c_int()
            status = nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor))
            name = name_buffer.value.decode(errors="replace")
            capability = f"{major.value}.{minor.value}" if status == 0 else capability_from_name(name)
            gpus.append(Gpu(name=name, compute_capability=capability, driver=driver))
        return gpus
    finally:
        nvml.nvmlShutdown()


def _from_nvidia_smi() -> list[Gpu] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    rows = _query_nvidia_smi("name,compute_cap,driver_version")
    if rows is None:  # drivers before 510 do not know the compute_cap field
        rows = [[name, "", driver] for name, driver in _query_nvidia_smi("name,driver_version") or []]
    gpus = []
    for row in rows:
        if len(row) != 3:
            return None
        name, capability, driver = row
        if not re.fullmatch(r"\d+\.\d+", capability):
            capability = capability_from_name(name) or ""
        gpus.append(Gpu(name=name, compute_capability=capability or None, driver=driver or None))
    return gpus


def _query_nvidia_smi(fields: str) -> list[list[str]] | None:
    try:
        result = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in result.stdout.splitlines() if line.strip()]
