"""Hostile inputs for every kind of input the CLI reads, and a runner for one of them.

Shared by tests/test_fuzz.py (a few hundred runs in CI) and benchmarks/fuzz_inputs.py (10,000).
Each generator takes a random.Random and returns a Case: the command line, the files it names
(written into a fresh folder; ``FIFO`` makes a named pipe) and what goes to stdin. The contents mix
valid seeds with the shapes the fuzz report found breaking things: nesting thousands deep, numbers
past Python's int-string limit, long whitespace runs, lone surrogates, NUL bytes, FIFOs, URLs,
``===`` specifiers, markers that cannot be compared, huge regex repeats.
"""

from __future__ import annotations

import functools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FIFO = b"\0FIFO\0"  # a file content that means: make a named pipe here
HOSTILE_TOKENS = (
    "[" * 2000,
    "{" * 2000,
    "(" * 600,
    "1" * 4301,
    "9" * 5000 + ".0",
    " " * 100_000 + "x",
    "\t" * 50_000 + "y",
    "\\ud800",
    "\x00",
    "===foo",
    '; python_version ~= "abc"',
    "https://example.invalid/requirements.txt",
    "\u202e\u200b",
    "a{99999999999}",
    "cuda:\n" * 2000,
    "\r\n" * 1000,
    "é" * 1000,
    "-r ",
    "--hash=sha256:" + "0" * 64,
)


@dataclass
class Case:
    kind: str
    args: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    stdin: bytes = b""


@dataclass
class Outcome:
    kind: str
    code: int | None  # None: killed at the timeout
    seconds: float
    traceback: bool
    internal_error: bool
    args: list[str]
    message: str = ""  # the last line on stderr

    @property
    def crashed(self) -> bool:
        return self.code == 3 or self.traceback or self.internal_error or (self.code or 0) < 0


def mutate(seed: str, rng: random.Random) -> str:
    """The seed with a few hostile tokens spliced in, slices duplicated or cut."""
    text = seed
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(text))
        choice = rng.random()
        if choice < 0.5:
            text = text[:at] + rng.choice(HOSTILE_TOKENS) + text[at:]
        elif choice < 0.7:
            text = text[:at] + text[at : at + rng.randint(1, 50)] * rng.randint(2, 2000) + text[at:]
        elif choice < 0.85:
            text = text[:at] + text[at + rng.randint(1, 30) :]
        else:
            text = (
                text[:at]
                + "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 40)))
                + text[at:]
            )
    return text


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


def _file_or_special(content: bytes, rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.04:
        return FIFO
    if roll < 0.08:
        return os.urandom(rng.randint(1, 4096))
    return content


REQUIREMENTS_SEED = (
    "--index-url https://example.invalid/simple\ntorch==2.5.1+cu121\ntransformers==4.44.0  # pinned\n"
    "flash_attn @ file:///w/flash_attn-2.6.3-cp311-cp311-linux_x86_64.whl\ntriton>=3.1\n"
    'accelerate==0.33.0 ; python_version < "3.0"\n-r base.txt\n'
)
RULE_SEED = (
    'id = "fuzz-rule"\ntitle = "t"\nseverity = "error"\ncomponent = "torch"\nsummary = "s"\n'
    "symptoms = ['cannot import name .*foo']\nreferences = [\"https://github.com/a/b/issues/1\"]\n"
    '[affects]\npackages = { torch = ">=2.0,<2.6" }\ncompute_capability = "<8.0"\n'
    '[fix]\nsummary = "x"\npins = ["torch>=2.6"]\n'
)
PYPROJECT_SEED = (
    '[project]\nname = "x"\n[tool.attn-doctor]\ngpus = ["H100"]\nfail-on = "error"\n'
    'features = ["sdpa"]\nignore = { some-rule = "why" }\n'
)
LOG_SEED = (
    "torch==2.6.0\ntransformers==4.44.0\nTraceback (most recent call last):\n"
    '  File "/x/site-packages/transformers/models/llama/modeling_llama.py", line 5, in f\n'
    "ImportError: cannot import name 'LlamaFlashAttention2' from 'transformers.models.llama.modeling_llama'\n"
    "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
)


def _environment_seed() -> dict:
    return {
        "schema": "attn-doctor/environment",
        "schema_version": 3,
        "packages": {"torch": {"name": "torch", "version": "2.5.1", "distribution": "torch", "origin": "x"}},
        "torch_build": {"cuda": "12.1", "hip": None},
        "gpus": [{"name": "H100", "compute_capability": "9.0", "driver": "550.54.15", "gfx": None}],
        "gpu_source": "nvml",
        "nvcc": "12.4",
        "python": "3.11.7",
        "platform": "linux",
        "machine": "x86_64",
        "os": "Linux",
        "libc": "glibc 2.35",
        "features": {"declared": None, "facts": []},
        "sources": ["this machine"],
        "target": "this machine",
        "origins": {},
    }


def _json_text(rng: random.Random) -> str:
    data = _environment_seed()
    roll = rng.random()
    if roll < 0.3:
        key = rng.choice(list(data))
        data[key] = rng.choice([True, 1, "\ud800", [], {}, None, 10**50, "1" * 5000, [[[[]]]]])
        return json.dumps(data)
    return mutate(json.dumps(data), rng)


def requirements(rng: random.Random) -> Case:
    text = mutate(REQUIREMENTS_SEED, rng)
    base = _file_or_special(_encoded(mutate("xformers==0.0.28.post1\n", rng)), rng)
    return Case(
        "requirements",
        ["check", "-r", "{dir}/requirements.txt"],
        {"requirements.txt": _file_or_special(_encoded(text), rng), "base.txt": base},
    )


PINFILES = Path(__file__).parent / "fixtures" / "pinfiles"


def pin_file(rng: random.Random) -> Case:
    """A lock or conda file (tests/fixtures/pinfiles), mutated, read by ``check -r``."""
    name = rng.choice(sorted(p.name for p in PINFILES.iterdir() if p.name != "README.md"))
    text = mutate((PINFILES / name).read_text(encoding="utf-8"), rng)
    return Case("pin-files", ["check", "-r", "{dir}/" + name], {name: _file_or_special(_encoded(text), rng)})


def env_file(rng: random.Random) -> Case:
    command = rng.choice(
        [["check", "--env-file"], ["merge"], ["report", "--env-file"], ["fix", "--env-file"]]
    )
    return Case(
        "env-file",
        [*command, "{dir}/env.json"],
        {"env.json": _file_or_special(_encoded(_json_text(rng)), rng)},
    )


def pin(rng: random.Random) -> Case:
    value = mutate(rng.choice(["torch==2.5.1", "transformers==4.44.0", "flash-attn==2.6.3"]), rng)
    command = rng.choice(["check", "fix", "report"])
    return Case("pin", [command, "--pin", value[:20000]])


def gpu(rng: random.Random) -> Case:
    value = mutate(rng.choice(["H100", "sm_90", "9.0", "RTX 4090", "MI300X", "gfx942"]), rng)
    return Case("gpu", ["check", "--gpu", value[:20000]])


def feature(rng: random.Random) -> Case:
    value = mutate(rng.choice(["flash_attention_2", "sdpa", "flex_attention"]), rng)
    return Case("feature", ["check", "--feature", value[:20000]])


def rule_file(rng: random.Random) -> Case:
    command = rng.choice(
        [["rules", "validate"], ["check", "--rules"], ["explain", "{dir}/log.txt", "--rules"]]
    )
    files = {
        "rules/fuzz-rule.toml": _file_or_special(_encoded(mutate(RULE_SEED, rng)), rng),
        "rules/good-rule.toml": _encoded(RULE_SEED.replace("fuzz-rule", "good-rule")),
        "log.txt": _encoded(mutate(LOG_SEED, rng)),
    }
    return Case("rules", [*command, "{dir}/rules"], files)


def pyproject(rng: random.Random) -> Case:
    text = mutate(PYPROJECT_SEED, rng)
    if rng.random() < 0.2:
        text = rng.choice(["tool = 1\n", "tool = []\n", "[[tool]]\n", "[tool]\nattn-doctor = 3\n"])
    return Case(
        "pyproject",
        ["check", "--config", "{dir}/pyproject.toml"],
        {"pyproject.toml": _file_or_special(_encoded(text), rng)},
    )


def log(rng: random.Random) -> Case:
    content = _file_or_special(_encoded(mutate(LOG_SEED, rng) * rng.randint(1, 50)), rng)
    if rng.random() < 0.5:
        return Case("log", ["explain", "{dir}/train.log"], {"train.log": content})
    return Case("log", ["explain", "-"], stdin=b"" if content == FIFO else content)


def site_packages(rng: random.Random) -> Case:
    metadata = mutate("Metadata-Version: 2.1\nName: torch\nVersion: 2.5.1\n\nDescription\n", rng)
    version_py = mutate("__version__ = '2.5.1'\ncuda: Optional[str] = '12.1'\nhip = None\n", rng)
    return Case(
        "site-packages",
        ["check", "--path", "{dir}/sp"],
        {
            "sp/torch-2.5.1.dist-info/METADATA": _file_or_special(_encoded(metadata), rng),
            "sp/torch/version.py": _file_or_special(_encoded(version_py), rng),
        },
    )


def repro_json(rng: random.Random) -> Case:
    text = mutate(json.dumps({"schema": "attn-doctor/repro", "schema_version": 1, "results": []}), rng)
    return Case(
        "repro-json",
        ["report", "--repro-json", "{dir}/r.json"],
        {"r.json": _file_or_special(_encoded(text), rng)},
    )


def numbers(rng: random.Random) -> Case:
    option, command = rng.choice(
        [("--probe-timeout", "check"), ("--timeout", "repro"), ("--distributed-timeout", "check")]
    )
    value = rng.choice(["-1", "0", "nan", "inf", "1" * 5000, "1e400", "abc", ""])
    args = [command, option, value] + (["--list"] if command == "repro" else [])
    return Case("numbers", args)


# version-like text with extra, missing or odd components, for every field read as a number
ODD_VERSIONS = (
    "9.0.0",
    "12.4.1.2.3",
    "9",
    "9.",
    ".9",
    "9.a",
    "1e3",
    "-1.0",
    "+9.0",
    "9.0" + ".0" * 1000,
    "9" * 400 + ".0",
    "0x9.0",
    "9,0",
    "9.0\n",
    " 9.0",
    "9..0",
    "sm_9000000000",
    "v9.0",
    "9.0rc1",
    "",
)
NUMERIC_FIELDS = ("compute_capability", "driver", "nvcc", "python", "cuda", "version", "cpus", "memory_gb")


def odd_versions(rng: random.Random) -> Case:
    """A version-like string with extra components in a numeric field of an env file, a --gpu or a
    --pin (a GPU's "9.0.0" crashed check, fix and merge once)."""
    value = rng.choice(ODD_VERSIONS)
    roll = rng.random()
    if roll < 0.2:
        return Case("odd-versions", [*rng.choice([["check"], ["wheel", "torch"]]), "--gpu", value])
    if roll < 0.35:
        return Case("odd-versions", ["check", "--pin", f"torch=={value}"])
    data = _environment_seed()
    field = rng.choice(NUMERIC_FIELDS)
    if field in ("compute_capability", "driver"):
        data["gpus"][0][field] = value
    elif field == "cuda":
        data["torch_build"]["cuda"] = value
    elif field == "version":
        data["packages"]["torch"]["version"] = value
    elif field in ("cpus", "memory_gb"):
        data["schema_version"] = 4
        data |= {"cpus": 16, "memory_gb": 64.0, field: rng.choice([value, 1e308, -1, 0, True, "16"])}
    else:
        data[field] = value
    command = rng.choice([["check"], ["fix"], ["report"], ["merge"], ["wheel", "torch", "flash-attn"]])
    text = json.dumps(data)
    if command[0] == "merge":
        return Case("odd-versions", ["merge", "{dir}/env.json"], {"env.json": _encoded(text)})
    return Case("odd-versions", [*command, "--env-file", "{dir}/env.json"], {"env.json": _encoded(text)})


EXTREME_NUMBERS = (
    "1e308",
    "1.7976931348623157e308",
    "4.9e-324",
    "1e-308",
    "-0",
    "-0.0",
    "9" * 30,
    "0x10",
    "1_000",
    "1e309",
    "-1e308",
    "2147483648",
    "9223372036854775808",
    "0.0000001",
)


def extreme_numbers(rng: random.Random) -> Case:
    """Extreme floats and integers for every numeric option (a 1e308 timeout overflowed time_t)."""
    option, command = rng.choice(
        [
            ("--probe-timeout", ["check"]),
            ("--distributed-timeout", ["check"]),
            ("--timeout", ["repro", "--list"]),
            ("--jobs", ["repro", "--list"]),
            ("--probe-timeout", ["report"]),
        ]
    )
    return Case("extreme-numbers", [command[0], option, rng.choice(EXTREME_NUMBERS), *command[1:]])


def escape_flood(rng: random.Random) -> Case:
    """A log flooded with terminal escape sequences: unterminated OSC (``ESC ]``), long CSI runs,
    lone ESCs, between real error lines."""
    unit = rng.choice(
        [
            b"\x1b]" + bytes(rng.randint(0x20, 0x7E) for _ in range(100)) + b"\n",
            b"\x1b[" + b"1;" * 500 + b"m text\n",
            b"\x1b" * 300 + b"\n",
            b"\x1b]8;;" + b"x" * 200 + b"\x1b\\link\x1b]8;;\x1b\\\n",
            b"\x1bP" + b"q" * 400 + b"\n",
        ]
    )
    content = unit * rng.randint(1_000, 30_000) + _encoded(LOG_SEED) + unit * rng.randint(1, 1_000)
    return Case("escape-flood", ["explain", "{dir}/train.log"], {"train.log": content})


@functools.cache
def _symptom_literals() -> list[str]:
    """Every rule symptom's literal (the text a line must hold for the pattern to be tried)."""
    from attn_doctor.engine.loader import database_path, load_rules
    from attn_doctor.engine.patterns import analyse

    found = []
    for rule in load_rules([database_path()], trust_database=True).rules:
        for pattern in rule.symptoms:
            found.append(analyse(pattern).literal)
    return sorted(set(found))


def long_lines_near_literals(rng: random.Random) -> Case:
    """Lines that hold a symptom's literal, then kilobytes of spaces and a distinct tail: the pattern
    runs on each (a literal followed by 4 KiB of spaces took over 5 s on 41 MB once)."""
    literal = rng.choice(_symptom_literals())
    pad = rng.choice([b" ", b"\t", b"x", b"( ", b"'"]) * rng.choice([1_024, 4_096, 16_384])
    lines = b"".join(_encoded(literal) + pad + f"tail {i}\n".encode() for i in range(rng.randint(100, 1_500)))
    return Case("long-literal", ["explain", "{dir}/train.log"], {"train.log": lines})


def many_file_merge(rng: random.Random) -> Case:
    """``merge`` of hundreds of env files (500 copies of one file took over 30 s once)."""
    count = rng.choice([50, 200, 500, 1_000])
    text = _encoded(json.dumps(_environment_seed()))
    files = {f"nodes/node{i}.json": text for i in range(count)}
    if rng.random() < 0.3:
        files[f"nodes/node{count}.json"] = _encoded(mutate(json.dumps(_environment_seed()), rng))
    args = ["merge", *(f"{{dir}}/{name}" for name in files)]
    if rng.random() < 0.3:
        args += ["--format", "json"]
    return Case("many-files", args, files)


GENERATORS: dict[str, Callable[[random.Random], Case]] = {
    "requirements": requirements,
    "pin-files": pin_file,
    "env-file": env_file,
    "pin": pin,
    "gpu": gpu,
    "feature": feature,
    "rules": rule_file,
    "pyproject": pyproject,
    "log": log,
    "site-packages": site_packages,
    "repro-json": repro_json,
    "numbers": numbers,
    "odd-versions": odd_versions,
    "extreme-numbers": extreme_numbers,
    "escape-flood": escape_flood,
    "long-literal": long_lines_near_literals,
    "many-files": many_file_merge,
}


def run_case(case: Case, timeout: float, python: str = sys.executable) -> Outcome:
    """The real CLI in a subprocess, in an empty folder holding the case's files."""
    with tempfile.TemporaryDirectory(prefix="attn-fuzz-") as folder:
        for name, content in case.files.items():
            path = Path(folder, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            if content == FIFO:
                os.mkfifo(path)
            else:
                path.write_bytes(content)
        # argv cannot carry a NUL byte (a limit of exec, not of the CLI)
        args = [arg.replace("{dir}", folder).replace("\0", "") for arg in case.args]
        env = {**os.environ, "NO_COLOR": "1"}
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [python, "-m", "attn_doctor", *args],
                input=case.stdin,
                capture_output=True,
                timeout=timeout,
                cwd=folder,
                env=env,
            )
        except subprocess.TimeoutExpired:
            return Outcome(case.kind, None, time.perf_counter() - start, False, False, case.args)
        output = done.stdout + done.stderr
        return Outcome(
            case.kind,
            done.returncode,
            time.perf_counter() - start,
            b"Traceback (most recent call last)" in output,
            b"internal error" in output,
            case.args,
            (done.stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:300],
        )
