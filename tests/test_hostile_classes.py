"""Issue 28, item 3: five classes of hostile input a fuzz harness found, each through the real CLI.

1. malformed numbers in an env file (a capability of "9.0.0"), on --gpu and --python, in a conda
   file and in torch/version.py: exit 2 naming the file and the field, never int()'s ValueError;
2. timeouts too large for the waits they reach (1e308), and a negative --jobs: exit 2 naming them;
3. a log of unterminated OSC escapes is read as fast as a plain log;
4. a log of symptom literals each followed by 4 KiB of spaces is read as fast as a plain log;
5. merge of 1,000 probe files (mostly alike, as a cluster's are) in under 5 s, same verdicts.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import cli
from test_bad_input import assert_one_line_error
from test_explain import load_benchmark

# ---------------------------------------------------------------- 1. malformed numbers


@pytest.fixture
def env_file(tmp_path: Path, site: Any) -> Callable[..., Path]:
    """``probe --json`` of a site with torch 2.5.1+cu121 and flash-attn 2.6.3, on an H100; the
    returned function writes a copy with ``edit`` applied to its JSON."""
    site.install("torch", "2.5.1+cu121", torch_cuda="12.1")
    site.install("flash-attn", "2.6.3")
    probed = cli("probe", "--json", "--path", site.path)
    assert probed.exit_code == 0, probed.output
    base = json.loads(probed.stdout)
    base["gpus"] = [
        {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": "550.54.15", "gfx": None}
    ]
    base["gpu_source"] = "nvml"

    def write(edit: Callable[[dict[str, Any]], None] = lambda data: None, name: str = "env.json") -> Path:
        data = json.loads(json.dumps(base))
        edit(data)
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return path

    return write


COMMANDS = [
    *(
        ["check", "--format", f, "--env-file"]
        for f in ("rich", "json", "markdown", "sarif", "junit", "github")
    ),
    ["check", "--format", "gitlab", "--env-file"],
    ["fix", "--env-file"],
    ["fix", "--format", "json", "--env-file"],
    ["wheel", "flash-attn", "--env-file"],
    ["report", "--env-file"],
    ["merge"],
]


def test_the_edited_env_file_is_valid(env_file: Callable[..., Path]) -> None:
    result = cli("check", "--env-file", env_file(), "--format", "json")
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)["environment"]["gpus"][0]["compute_capability"] == "9.0"


@pytest.mark.parametrize("capability", ["9.0.0", "9", "9.a", "-1.0", "1e3", "٩.٠", "¹.²", " 9.0", "sm_90"])
def test_a_malformed_capability_is_exit_2_naming_file_and_field(
    env_file: Callable[..., Path], capability: str
) -> None:
    path = env_file(lambda data: data["gpus"][0].update(compute_capability=capability))
    for command in COMMANDS:
        start = time.perf_counter()
        assert_one_line_error(cli(*command, path), "env.json", "gpus[0].compute_capability")
        assert time.perf_counter() - start < 10, command


def _set(*keys: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        for key in keys[:-1]:
            data = data[key]  # type: ignore[index]
        data[keys[-1]] = value  # type: ignore[index]

    return edit


@pytest.mark.parametrize(
    "edit, field",
    [
        (_set("gpus", 0, "driver", value="550.²"), "gpus[0].driver"),
        (_set("gpus", 0, "driver", value="[N/A]"), "gpus[0].driver"),
        (_set("gpus", 0, "capabilities", value=["8.6", "9.0.0"]), "gpus[0].capabilities"),
        (_set("torch_build", "cuda", value="12.x"), "torch_build.cuda"),
        (_set("torch_build", "cuda", value="١٢.١"), "torch_build.cuda"),
        (_set("nvcc", value="12.a"), "nvcc"),
        (_set("python", value="3.x"), "python"),
        (_set("packages", "torch", "version", value="2.x"), "packages.torch.version"),
        (_set("packages", "flash-attn", "version", value="9_0"), "packages.flash-attn.version"),
        (_set("packages", "torch", "version", value="1" * 65), "packages.torch.version"),
        (_set("cpus", value=1e300), "cpus"),
    ],
)
def test_every_numeric_field_is_checked_where_the_file_is_read(
    env_file: Callable[..., Path], edit: Callable[[dict[str, Any]], None], field: str
) -> None:
    path = env_file(edit)
    for command in (["check", "--env-file"], ["wheel", "flash-attn", "--env-file"], ["merge"]):
        assert_one_line_error(cli(*command, path), "env.json", field)


@pytest.mark.parametrize("gpu", ["9.0.0", "sm_9000000000", "9", "9.a", "-1.0", "1e3", "٩.٠", "sm_٩٠"])
def test_a_malformed_gpu_option_is_exit_2(gpu: str) -> None:
    assert_one_line_error(cli("check", "--pin", "torch==2.5.1+cu121", "--gpu", gpu), "--gpu")


def test_python_option_digits_are_ascii(tmp_path: Path) -> None:
    requirements = tmp_path / "r.txt"
    requirements.write_text("torch==2.5.1\n")
    assert_one_line_error(cli("check", "-r", requirements, "--python", "3.١١"), "--python '3.١١'")


@pytest.mark.parametrize(
    "line, value", [("pytorch-cuda=12.x", "12.x"), ("pytorch-cuda=١٢.١", "١٢.١"), ("python=3.x", "3.x")]
)
def test_conda_versions_read_as_numbers_are_checked(tmp_path: Path, line: str, value: str) -> None:
    conda = tmp_path / "environment.yml"
    conda.write_text(f"name: t\ndependencies:\n  - pytorch=2.5.1\n  - {line}\n")
    for command in ("check", "fix"):
        assert_one_line_error(cli(command, "-r", conda, "--gpu", "sm_90"), "environment.yml:4", value)


def test_a_torch_version_py_with_a_malformed_cuda_is_a_problem(site: Any) -> None:
    site.install("torch", "2.5.1+cu121", torch_cuda="12.x")
    site.install("flash-attn", "2.6.3")
    for command in (["check"], ["wheel", "flash-attn"]):
        result = cli(*command, "--path", site.path, "--gpu", "sm_90")
        assert result.exit_code in (1, 2), result.output
        assert "internal error" not in result.stderr and "Traceback" not in result.output
        assert "version.py" in result.stderr and "cuda: '12.x'" in result.stderr


def test_nvidia_smi_output_not_shaped_like_a_version_is_unknown(fake_nvidia_smi: Any) -> None:
    """What probe writes, --env-file reads: "[N/A]" is an unknown driver, not a malformed file."""
    fake_nvidia_smi("NVIDIA H100 80GB HBM3, [N/A], [N/A]")
    probed = cli("probe", "--json")
    assert probed.exit_code == 0, probed.output
    gpu = json.loads(probed.stdout)["gpus"][0]
    assert (gpu["compute_capability"], gpu["driver"]) == ("9.0", None)


# ---------------------------------------------------------------- 2. numeric options


@pytest.mark.parametrize("value", ["1e308", "1e10", "604801", "nan", "inf", "-1", "0"])
@pytest.mark.parametrize(
    "command",
    [
        ["repro", "varlen-cu-seqlens", "--timeout"],
        ["check", "--probe-timeout"],
        ["check", "--distributed-timeout"],
        ["report", "--probe-timeout"],
    ],
)
def test_a_timeout_past_the_maximum_is_exit_2(command: list[str], value: str) -> None:
    start = time.perf_counter()
    result = cli(*command, value)
    assert result.exit_code == 2, result.output
    assert command[-1] in result.output and "internal error" not in result.output
    assert time.perf_counter() - start < 10


def test_the_maximum_timeout_is_accepted() -> None:
    assert cli("repro", "--list", "--timeout", "604800").exit_code == 0


def test_a_negative_jobs_count_is_exit_2() -> None:
    result = cli("repro", "varlen-cu-seqlens", "--jobs", "-1")
    assert result.exit_code == 2 and "--jobs" in result.output


@pytest.mark.parametrize(
    "variables, named",
    [
        ({"WORLD_SIZE": "1" + "0" * 12}, "WORLD_SIZE"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT"),
        ({"MASTER_PORT": "-1"}, "MASTER_PORT"),
    ],
)
def test_launcher_numbers_are_checked(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: str
) -> None:
    environment = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", **variables}
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert_one_line_error(cli("check", "--distributed", "--pin", "torch==2.5.1"), named)


# ---------------------------------------------------------------- 3, 4. explain's rate


def _seconds_per_mb(folder: Path, write: Callable[[Path, float], int]) -> float:
    """explain's time per MB past its fixed start: (time of 6 MB - time of 1 MB) / 5, best of two."""
    seconds = []
    for megabytes in (1, 6):
        log = folder / f"{megabytes}.log"
        write(log, megabytes)
        best = float("inf")
        for _ in range(2):
            start = time.perf_counter()
            result = cli(
                "explain", log, "--pin", "transformers==4.44.0", "--gpu", "sm_90", "--format", "json"
            )
            best = min(best, time.perf_counter() - start)
            assert result.exit_code in (0, 1), result.output
        seconds.append(best)
    return max(seconds[1] - seconds[0], 1e-3) / 5


@pytest.fixture(scope="module")
def plain_rate(tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds per MB on the benchmark's noisy training log: the plain log the others are held to."""
    return _seconds_per_mb(tmp_path_factory.mktemp("plain"), load_benchmark().write_training_log)


def test_an_osc_flood_is_read_faster_than_a_plain_log(tmp_path: Path, plain_rate: float) -> None:
    """Its lines hold no symptom and need no per-line facts: on a 2-core machine it takes under half
    the training log's time per MB (1 to 1.6 times it before: a backtrack per byte of each escape,
    then a substring search per literal through "title title ...")."""
    osc = _seconds_per_mb(tmp_path, load_benchmark().write_osc_flood)
    assert osc <= 0.75 * plain_rate, f"OSC flood {osc:.3f} s/MB, the training log {plain_rate:.3f} s/MB"


def test_escapes_are_still_removed(tmp_path: Path) -> None:
    """Terminated OSC (BEL, ST) and CSI go, and the symptom after them is found; an unterminated
    OSC loses only its ESC ], so a symptom inside it is found too."""
    symptom = "flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c105ErrorC2E"
    for line in (
        f"\x1b]0;title\x07\x1b[31m{symptom}\x1b[0m",
        f"\x1b]8;;http://x\x1b\\{symptom}",
        f"\x1b]0;{symptom}" + "x" * 4000,
    ):
        log = tmp_path / "log.txt"
        log.write_text(f"Traceback (most recent call last):\nImportError: {line}\n")
        result = cli(
            "explain", log, "--pin", "torch==2.5.1", "--pin", "flash-attn==2.6.3", "--format", "json"
        )
        assert result.exit_code in (0, 1), result.output
        assert json.loads(result.stdout)["causes"], line[:40]


def test_literals_before_long_runs_of_spaces_are_read_as_fast_as_a_plain_log(
    tmp_path: Path, plain_rate: float
) -> None:
    """Every line a hit for one literal, then spaces: one set search a window and a line (before,
    every literal's substring search stepped a byte at a time through the spaces: 2x the time)."""
    long_lines = _seconds_per_mb(tmp_path, load_benchmark().write_long_after_literal)
    assert long_lines <= plain_rate, (
        f"long lines {long_lines:.3f} s/MB, the training log {plain_rate:.3f} s/MB"
    )


def test_the_literal_index_finds_what_the_substring_searches_find(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RE2's set over windows and lines, or (without RE2) a search per literal: the same causes,
    counts and lines, on a log of every kind of line the benchmark writes."""
    benchmark = load_benchmark()
    log = tmp_path / "mixed.log"
    parts = []
    for write in (benchmark.write_asserts, benchmark.write_osc_flood, benchmark.write_long_after_literal):
        write(tmp_path / "part.log", 0.2)
        parts.append((tmp_path / "part.log").read_bytes())
    benchmark.write_training_log(tmp_path / "part.log", 0.5, benchmark.seed_a_tail(50))
    log.write_bytes(b"".join(parts) + (tmp_path / "part.log").read_bytes())
    args = ("explain", log, "--pin", "transformers==4.44.0", "--gpu", "sm_90", "-f", "json", "-v")
    with_set = json.loads(cli(*args).stdout)
    monkeypatch.setitem(sys.modules, "re2", None)  # import re2 fails: the fallback searches
    without = json.loads(cli(*args).stdout)
    assert with_set["causes"] and with_set["causes"] == without["causes"]


# ---------------------------------------------------------------- 5. merge


def test_merge_of_1000_files_is_fast_and_keeps_each_files_verdicts(
    env_file: Callable[..., Path], tmp_path: Path
) -> None:
    copy = env_file().read_text()
    folder = tmp_path / "nodes"
    folder.mkdir()
    files = []
    for index in range(1000):
        files.append(folder / f"node{index:04d}.json")
        files[-1].write_text(copy)
    odd = env_file(_set("gpus", 0, "compute_capability", value="8.0"), name="odd.json")
    start = time.perf_counter()
    result = cli("merge", *files, odd, "--format", "json")
    seconds = time.perf_counter() - start
    assert result.exit_code in (0, 1), result.output
    assert seconds < 5, f"merge of 1,001 files: {seconds:.1f} s"
    cluster = json.loads(result.stdout)
    for path in (files[0], files[-1], odd):  # as merged alone: one check per distinct file is enough
        alone = json.loads(cli("merge", path, "--format", "json").stdout)
        for verdict in ("affected", "unknown"):
            expected = {f["id"] for f in alone["findings"] if f[verdict]}
            merged = {f["id"] for f in cluster["findings"] if str(path) in f[verdict]}
            assert merged == expected, (path.name, verdict)
    gpus = next(d["values"] for d in cluster["drift"] if d["fact"] == "GPU model")
    assert [str(odd)] in [value["members"] for value in gpus]
