"""Tests for the mutants of attn_doctor/facts/ that survived mutmut (benchmarks/mutation_score.py
--part facts; docs/mutation-testing.md). Each runs in this process (mutmut maps a test only to the
functions its own process calls) on real inputs: pin files in their real formats written to
tmp_path, read as ``-r`` reads them; real log text; a real project folder; a real nvidia-smi
script on PATH. The docstring names the mutants a test kills; the tables pin whole classes of them
(an error path's exact text kills its "origin -> None" and "message -> XX..XX" mutants, sampled
or not)."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest

from attn_doctor.config import Config
from attn_doctor.errors import InputError
from attn_doctor.explain.reader import LogReader
from attn_doctor.facts import gpus, system
from attn_doctor.facts.assemble import EnvironmentInputs, _fill_from_log, assemble
from attn_doctor.facts.log_facts import LogFactCollector, LogFacts
from attn_doctor.facts.model import Environment, Gpu, marker_environment
from attn_doctor.facts.probe import probe_environment
from attn_doctor.facts.project_scan import Hit, ProjectScan
from attn_doctor.facts.sources import dockerfile, read_declared, read_dockerfile
from attn_doctor.facts.sources.common import Declared, applies

# the target every pin file below is read for: Linux x86_64, CPython 3.11
MARKERS = marker_environment(Environment(python="3.11.9", platform="linux", machine="x86_64"))


def declared(path: Path, text: str, extras: frozenset[str] = frozenset()) -> Declared:
    """``text`` written to ``path`` and read as ``-r path`` reads it (the format chosen by name and text)."""
    path.write_text(text)
    return read_declared(path, MARKERS, extras=extras)


def read_error(path: Path, text: str) -> str:
    """The one-line InputError reading ``text`` as ``path`` gives."""
    with pytest.raises(InputError) as caught:
        declared(path, text)
    return str(caught.value)


def packages(facts: Declared) -> dict[str, tuple[str | None, str, str]]:
    """name -> (version, origin, distribution) of each package read."""
    return {name: (p.version, p.origin, p.distribution) for name, p in facts.packages.items()}


def log_facts(text: str) -> LogFacts:
    """What the log collector reads from ``text``, as explain feeds it."""
    collector = LogFactCollector()
    for block in LogReader(io.BytesIO(text.encode()), "error.log"):
        collector.feed(block)
    return collector.facts


# ---- facts/sources: every bad input is one line naming the file (and line) at fault ------------------

BROKEN = [
    # requirements.py: read_lines, _include (x__include__mutmut_16: the loop's origin was None)
    ("req.txt", "torch==2.5.1\nnot a req!!\n", "{d}/req.txt:2: not a requirement: "),
    ("req.txt", "-r req.txt\n", "{d}/req.txt:1 (req.txt): requirements include themselves (-r/-c loop)"),
    ("req.txt", "-r missing.txt\n", "{d}/req.txt:1 (missing.txt): no such file"),
    (
        "req.txt",
        "-r https://example.com/req.txt\n",
        "{d}/req.txt:1: https://example.com/req.txt: URLs are not supported: download the file first",
    ),
    ("req.txt", "torch===abc\n", "{d}/req.txt:1: 'abc' is not a valid PEP 440 version"),
    (
        "req.txt",
        'torch==2.5.1; python_version ~= "3"\n',
        "{d}/req.txt:1: a marker that cannot be evaluated: Undefined <Op('~=')> on '3.11' and '3'.",
    ),
    # pipfile_lock.py (x_read__mutmut_33: origin None; x_read__mutmut_36: the message dropped)
    ("Pipfile.lock", "not json", "{d}/Pipfile.lock: not JSON: Expecting value: line 1 column 1 (char 0)"),
    ("Pipfile.lock", '{"default": []}', "{d}/Pipfile.lock default: must be an object of packages"),
    ("Pipfile.lock", "[]", "{d}/Pipfile.lock default: must be an object of packages"),
    (
        "Pipfile.lock",
        '{\n "default": {\n  "torch": "==2.5.1"\n }\n}',
        '{d}/Pipfile.lock:1: "torch" must be an object',
    ),
    (
        "Pipfile.lock",
        '{\n "default": {\n  "triton": {},\n  "torch": [\n  ]\n }\n}',
        '{d}/Pipfile.lock:1: "torch" must be an object',
    ),
    # pyproject.py (x__strings__mutmut_7: the message)
    (
        "pyproject.toml",
        '[project]\nname = "x"\ndependencies = "torch"\n',
        "{d}/pyproject.toml: dependency lists must be arrays",
    ),
    (
        "pyproject.toml",
        '[dependency-groups]\ndev = "pytest"\n',
        "{d}/pyproject.toml: dependency lists must be arrays",
    ),
    (
        "pyproject.toml",
        'project = "x"\n',
        "{d}/pyproject.toml: [project] and [dependency-groups] must be tables",
    ),
    (
        "pyproject.toml",
        "dependency-groups = 1\n",
        "{d}/pyproject.toml: [project] and [dependency-groups] must be tables",
    ),
    (
        "pyproject.toml",
        '[project]\noptional-dependencies = "x"\n',
        "{d}/pyproject.toml [project.optional-dependencies]: must be a table",
    ),
    ("pyproject.toml", "[project\n", "{d}/pyproject.toml: not valid TOML: "),
    (
        "pyproject.toml",
        '[project]\nname = "x"\ndependencies = ["not a req!!"]\n',
        "{d}/pyproject.toml:3: not a requirement: ",
    ),
    # toml_lock.py through uv.lock, poetry.lock and pylock.toml
    ("uv.lock", "package = 1\n", "{d}/uv.lock package: must be an array of tables"),
    ("uv.lock", "package = [1]\n", "{d}/uv.lock package: must be an array of tables"),
    (
        "uv.lock",
        '[[package]]\nname = 3\nversion = "1"\n',
        "{d}/uv.lock:1: a package entry needs a string name and version",
    ),
    (
        "uv.lock",
        'version = 1\n\n[[package]]\nname = "torch"\nversion = [1]\n',
        "{d}/uv.lock:4: a package entry needs a string name and version",
    ),
    (
        "uv.lock",
        '[[package]]\nname = "torch"\nversion = "abc"\n',
        "{d}/uv.lock:2: 'abc' is not a valid PEP 440 version",
    ),
    ("poetry.lock", "package = 1\n", "{d}/poetry.lock package: must be an array of tables"),
    (
        "poetry.lock",
        '[[package]]\nname = "torch"\nversion = "abc"\n',
        "{d}/poetry.lock:2: 'abc' is not a valid PEP 440 version",
    ),
    ("pylock.toml", "packages = 1\n", "{d}/pylock.toml packages: must be an array of tables"),
    (
        "pylock.toml",
        "[[packages]]\nname = 3\n",
        "{d}/pylock.toml:1: a packages entry needs a string name and version",
    ),
    # conda_env.py and conda_names.py: versions read as numbers later are checked here
    (
        "environment.yml",
        "dependencies:\n  - pytorch-cuda=12.x\n",
        "{d}/environment.yml:2: '12.x' is not a CUDA version such as 12.1",
    ),
    (
        "environment.yml",
        "dependencies:\n  - python=3.x\n",
        "{d}/environment.yml:2: '3.x' is not a Python version such as 3.11",
    ),
    (
        "environment.yml",
        "dependencies:\n  - pip:\n    - not a req!!\n",
        "{d}/environment.yml:3: not a requirement: ",
    ),
    # dockerfile.py through -r (a Dockerfile given as a pin file)
    ("Dockerfile", "# nothing\nRUN pip install torch\n", "{d}/Dockerfile: no FROM line"),
    # setup_py.py
    (
        "setup.py",
        "from setuptools import setup\nsetup(install_requires=deps())\n",
        "{d}/setup.py: install_requires is not a literal list; not supported",
    ),
    ("setup.py", "import setuptools\n", "{d}/setup.py: no setup(...) call; not supported"),
    ("setup.py", "setup(install_requires=['torch=2.5.1'])\n", "{d}/setup.py:1: not a requirement: "),
    ("setup.py", "setup(\n", "{d}/setup.py:1: not Python that parses"),
]


@pytest.mark.parametrize(("name", "text", "expected"), BROKEN)
def test_a_broken_pin_file_is_one_line_naming_the_file_and_line(
    tmp_path: Path, name: str, text: str, expected: str
):
    """x__include__mutmut_16 (requirements: a -r loop's error lost its origin: "None: ..."),
    x_read__mutmut_33 and x_read__mutmut_36 (Pipfile.lock: an entry that is not an object lost its
    origin, then its message), x__strings__mutmut_7 (pyproject: the message "XX...XX"), and the
    same mutants of every other error path of the readers. The user acts on the FILE:LINE and the
    words: "None: must be an object" says neither which file nor what is wrong."""
    error = read_error(tmp_path / name, text)
    expected = expected.format(d=tmp_path)
    if expected.endswith(": "):  # the rest is packaging's or the parser's own words
        assert error.startswith(expected), error
        assert "\n" not in error and len(error) > len(expected)
    else:
        assert error == expected


def test_an_include_chain_past_the_depth_limit_names_the_include_that_crossed_it(tmp_path: Path):
    """x__include__mutmut_* of the depth error (its origin and words): eleven files deep, the error
    names the file and line of the include that went past the limit."""
    for index in range(12):
        (tmp_path / f"d{index}.txt").write_text(f"# level {index}\n-r d{index + 1}.txt\n")
    (tmp_path / "d12.txt").write_text("torch==2.5.1\n")
    with pytest.raises(InputError) as caught:
        read_declared(tmp_path / "d0.txt", MARKERS)
    assert (
        str(caught.value) == f"{tmp_path}/d10.txt:2 (d11.txt): requirements included more than 10 files deep"
    )


def test_a_requirements_file_reads_each_kind_of_line(tmp_path: Path):
    """x__version_from_url__mutmut_6 (the wheel name cut at the last '#' instead of the first: a
    URL with two fragments lost its version) and the line kinds of read_lines: an -e line's
    #egg=NAME&subdirectory=... names the package, --hash options are dropped from a continued
    line, a marker for another platform leaves its package out, an ``extra`` marker reads extra as
    "" (common.applies), and an option the reader does not know is a problem, not an error."""
    text = (
        "torch @ file:///wheels/torch-2.5.1-cp311-cp311-linux_x86_64.whl#sha256=ab#egg=torch\n"
        "-e git+https://github.com/Dao-AILab/flash-attention#egg=flash_attn&subdirectory=hopper\n"
        "transformers>=4.40 \\\n"
        "  --hash=sha256:abc\n"
        "triton==3.1.0 ; sys_platform == 'win32'\n"
        "accelerate==1.0.0; extra != 'gpu'\n"
        "peft==0.13.0; extra == 'gpu'\n"
        "-i https://download.pytorch.org/whl/cu121\n"
        "--frobnicate yes\n"
        "xformers @ https://example.com/xformers-0.0.28.tar.gz\n"
    )
    facts = declared(tmp_path / "requirements.txt", text)
    req = tmp_path / "requirements.txt"
    assert packages(facts) == {
        "torch": (
            "2.5.1",
            f"{req}:1 (file:///wheels/torch-2.5.1-cp311-cp311-linux_x86_64.whl#sha256=ab#egg=torch)",
            "torch",
        ),
        "flash-attn": (None, f"{req}:2", "flash_attn"),
        "transformers": (None, f"{req}:3", "transformers"),
        "accelerate": ("1.0.0", f"{req}:6", "accelerate"),
        "xformers": (None, f"{req}:10 (https://example.com/xformers-0.0.28.tar.gz)", "xformers"),
    }
    assert facts.problems == [f"{req}:9: --frobnicate yes: not a line this reader understands (skipped)"]


def test_a_constraints_include_gives_its_own_file_and_line(tmp_path: Path):
    """_include/read_lines: a package read from an included file says that file's line, after
    comments and blank lines (numbered as the user's editor numbers them)."""
    (tmp_path / "constraints.txt").write_text("# pins\n\nxformers==0.0.28\n")
    facts = declared(tmp_path / "requirements.txt", "-c constraints.txt\ntorch==2.5.1\n")
    assert packages(facts) == {
        "xformers": ("0.0.28", f"{tmp_path}/constraints.txt:3", "xformers"),
        "torch": ("2.5.1", f"{tmp_path}/requirements.txt:2", "torch"),
    }


@pytest.mark.parametrize(
    ("marker", "holds"),
    [('extra != "gpu"', True), ('extra == ""', True), ('extra == "gpu"', False), (None, True), ("", True)],
)
def test_a_marker_on_an_extra_reads_the_extra_as_empty(marker: str | None, holds: bool):
    """x_applies__mutmut_6 ({"EXTRA": ""}: the target states no extra, so a requirement of the base
    install (``extra != "gpu"``) applies and one of an extra does not). With packaging >= 22 the
    marker's own default for "extra" is "" too, so the mutant is equivalent there; the test keeps
    the behaviour for any packaging the project allows (>= 23)."""
    assert applies(marker, MARKERS, "requirements.txt:1") is holds


def test_pipfile_lock_reads_default_with_lines_and_markers(tmp_path: Path):
    """pipfile_lock.read: "==X" is a pin, "*" an unknown version, a marker for another platform
    leaves the package out, ``develop`` is not the deployed stack; each origin is its key's line."""
    text = json.dumps(
        {
            "_meta": {"hash": {"sha256": "0"}},
            "default": {
                "torch": {"version": "==2.5.1"},
                "triton": {"version": "*"},
                "xformers": {"version": "==0.0.28", "markers": "sys_platform == 'win32'"},
            },
            "develop": {"peft": {"version": "==0.13.0"}},
        },
        indent=4,
    )
    facts = declared(tmp_path / "Pipfile.lock", text)
    lock = tmp_path / "Pipfile.lock"
    assert packages(facts) == {
        "torch": ("2.5.1", f"{lock}:8", "torch"),
        "triton": (None, f"{lock}:11", "triton"),
    }


def test_pyproject_reads_every_list_with_the_line_of_each_requirement(tmp_path: Path):
    """pyproject.read/_strings/_string_lines: [project] dependencies, the optional extras asked
    for (--extra fa) and the default dependency groups (an include-group table skipped), a range an
    unknown version; without --extra the extra's packages are only maybe installed."""
    text = (
        '[project]\nname = "x"\ndependencies = [\n  "torch==2.5.1",\n  "transformers>=4.40",\n]\n'
        '[project.optional-dependencies]\nfa = ["flash-attn==2.7.4.post1"]\n'
        '[dependency-groups]\ndev = [{include-group = "x"}, "peft==0.13.0"]\n'
    )
    path = tmp_path / "pyproject.toml"
    unasked = declared(path, text)
    assert "flash-attn" not in packages(unasked)
    assert unasked.optional["flash-attn"] == f"the extra 'fa' ({path}:8; --extra fa)"
    facts = declared(path, text, frozenset({"fa"}))
    assert packages(facts) == {
        "torch": ("2.5.1", f"{path}:4", "torch"),
        "transformers": (None, f"{path}:5", "transformers"),
        "flash-attn": ("2.7.4.post1", f"{path}:8", "flash-attn"),
        "peft": ("0.13.0", f"{path}:10", "peft"),
    }


def test_a_lock_beside_the_pyproject_pins_its_ranges(tmp_path: Path):
    """pyproject._LOCKS: uv.lock beside the file states the installed version of a range."""
    (tmp_path / "uv.lock").write_text(
        'version = 1\n\n[[package]]\nname = "transformers"\nversion = "4.46.0"\n'
    )
    facts = declared(
        tmp_path / "pyproject.toml", '[project]\nname = "x"\ndependencies = ["transformers>=4.40"]\n'
    )
    assert packages(facts) == {"transformers": ("4.46.0", f"{tmp_path}/uv.lock:4", "transformers")}


def test_conda_environment_file_quoted_items_pip_list_cuda_and_python(tmp_path: Path):
    """x__unquoted__mutmut_15 (value[1:-2]: a quoted item lost its last character, 'pytorch=2.5.1'
    read as 2.5. and "pytorch-cuda=12.1" as 12.), and the facts conda_env reads: the pip: list's
    lines, pytorch-cuda as torch's CUDA and python's version, each with its line."""
    text = (
        "name: x\nchannels:\n  - pytorch\ndependencies:\n  - python=3.11\n  - 'pytorch=2.5.1'\n"
        '  - "pytorch-cuda=12.1"\n  - pip\n  - pip:\n    - "transformers==4.46.0"\n'
        "    - flash-attn==2.7.4.post1  # a comment\n"
    )
    facts = declared(tmp_path / "environment.yml", text)
    env = tmp_path / "environment.yml"
    assert packages(facts) == {
        "torch": ("2.5.1", f"{env}:6", "pytorch"),
        "transformers": ("4.46.0", f"{env}:10", "transformers"),
        "flash-attn": ("2.7.4.post1", f"{env}:11", "flash-attn"),
    }
    assert (facts.torch_cuda, facts.python) == (("12.1", f"{env}:7"), ("3.11", f"{env}:5"))


def test_yaml_the_conda_reader_does_not_read_is_a_problem(tmp_path: Path):
    """conda_env.read: a flow mapping is reported with its line, the rest still read."""
    facts = declared(tmp_path / "environment.yml", "dependencies:\n  - {a: b}\n  - pytorch=2.5.1\n")
    env = tmp_path / "environment.yml"
    assert packages(facts) == {"torch": ("2.5.1", f"{env}:3", "pytorch")}
    assert facts.problems == [f"{env}:2: {{a: b}}: YAML this reader does not read (skipped)"]


def test_a_conda_environment_not_named_yml_is_recognised_by_its_text(tmp_path: Path):
    """x_recognises__mutmut_18 (re.search(text): a TypeError): a file with a top-level
    ``dependencies:`` and a ``- pip:`` list is conda's environment file whatever its name, not a
    requirements file (which would fail on "name: x")."""
    text = "name: x\ndependencies:\n  - pytorch=2.5.1\n  - pip:\n    - transformers==4.46.0\n"
    facts = declared(tmp_path / "conda-env.txt", text)
    env = tmp_path / "conda-env.txt"
    assert packages(facts) == {
        "torch": ("2.5.1", f"{env}:3", "pytorch"),
        "transformers": ("4.46.0", f"{env}:5", "transformers"),
    }


def test_conda_list_explicit_and_export_give_torchs_cuda_from_the_build(tmp_path: Path):
    """conda_list.read: an @EXPLICIT URL's and an export line's build string name torch's CUDA."""
    url = "https://conda.anaconda.org/pytorch/linux-64/pytorch-2.5.1-py3.11_cuda12.1_cudnn9.1.0_0.tar.bz2"
    explicit = declared(tmp_path / "explicit.txt", f"# platform: linux-64\n@EXPLICIT\n{url}\n")
    assert packages(explicit) == {"torch": ("2.5.1", f"{tmp_path}/explicit.txt:3", "pytorch")}
    assert explicit.torch_cuda == ("12.1", f"{tmp_path}/explicit.txt:3")
    export = declared(
        tmp_path / "export.txt", "pytorch=2.5.1=py3.11_cuda12.1_cudnn9.1.0_0\npython=3.11.9=h955ad1f_0\n"
    )
    assert (export.torch_cuda, export.python) == (
        ("12.1", f"{tmp_path}/export.txt:1"),
        ("3.11.9", f"{tmp_path}/export.txt:2"),
    )


# ---- dockerfile.py ----------------------------------------------------------------------------------


def dockerfile_facts(tmp_path: Path, text: str, stage: str | None = None) -> Declared:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return read_dockerfile(path, MARKERS, stage)


def test_wheels_in_a_dockerfile_are_read_by_their_file_names_and_other_paths_are_problems(tmp_path: Path):
    """A wheel, local or a URL, names its package and version (PEP 427); a path that is no wheel's
    file name, and a line pip cannot read as a requirement, are problems of their line, never the
    end of the file: the pinned requirement and conda's pytorch-cuda on the same line still are."""
    facts = dockerfile_facts(
        tmp_path,
        "FROM python:3.11-slim\n"
        "RUN pip install ./wheels/flash_attn-2.7.4-cp311-cp311-linux_x86_64.whl "
        "https://example.com/x/triton-3.1.0-cp311-cp311-linux_x86_64.whl /opt/w.whl \\\n"
        "    torch==2.5.1 && conda install -y pytorch-cuda=12.1\n"
        "RUN pip install 'xformers=0.0.28'\n",
    )
    origin = f"{tmp_path}/Dockerfile:2"
    assert packages(facts) == {
        "flash-attn": (
            "2.7.4",
            f"{origin} (./wheels/flash_attn-2.7.4-cp311-cp311-linux_x86_64.whl)",
            "flash_attn",
        ),
        "triton": (
            "3.1.0",
            f"{origin} (https://example.com/x/triton-3.1.0-cp311-cp311-linux_x86_64.whl)",
            "triton",
        ),
        "torch": ("2.5.1", origin, "torch"),
    }
    assert facts.torch_cuda == ("12.1", origin)
    assert (
        facts.problems[0]
        == f"{origin}: /opt/w.whl: not a wheel's file name (NAME-VERSION-TAGS.whl), not read"
    )
    assert facts.problems[1].startswith(f"{tmp_path}/Dockerfile:4: xformers=0.0.28: not a requirement: ")
    assert len(facts.problems) == 2


def test_torch_installed_over_an_image_drops_the_images_cuda(tmp_path: Path):
    """x__stage_facts__mutmut_38 (base.torch_cuda = "" instead of None): the image's CUDA is not
    the CUDA of a torch pip installed over it; the fact is absent (None), as Declared types it,
    not an empty CUDA version. Without the install the image's CUDA stands."""
    image = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    over = dockerfile_facts(tmp_path, f"FROM {image}\nRUN pip install torch==2.6.0\n")
    assert over.torch_cuda is None
    assert packages(over) == {"torch": ("2.6.0", f"{tmp_path}/Dockerfile:2", "torch")}
    kept = dockerfile_facts(tmp_path, f"FROM {image}\nRUN pip install transformers==4.46.0\n")
    assert kept.torch_cuda == ("12.4", f"image {image} (its tag)")
    assert kept.packages["torch"].version == "2.5.1"


def test_a_stage_follows_the_stage_it_is_built_from(tmp_path: Path):
    """_stage_facts through a FROM of another stage, and the --stage errors' exact words."""
    text = (
        "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime AS base\nRUN pip install torch==2.6.0\n"
        "FROM base\nRUN uv pip install transformers==4.46.0\n"
    )
    facts = dockerfile_facts(tmp_path, text)
    assert packages(facts) == {
        "transformers": ("4.46.0", f"{tmp_path}/Dockerfile:4", "transformers"),
        "torch": ("2.6.0", f"{tmp_path}/Dockerfile:2", "torch"),
    }
    assert facts.torch_cuda is None
    with pytest.raises(InputError) as caught:
        dockerfile_facts(tmp_path, text, stage="nope")
    assert str(caught.value) == f"--stage nope: no such stage in {tmp_path}/Dockerfile (stages: base, 1)"


def test_a_run_line_the_shell_cannot_split_is_a_problem(tmp_path: Path):
    """dockerfile._installs: an unclosed quote is reported with its line, not guessed at."""
    facts = dockerfile.read(
        tmp_path / "Dockerfile", "FROM python:3.11-slim\nRUN pip install 'torch==2.5.1\n", MARKERS
    )
    assert facts.problems == [
        f"{tmp_path}/Dockerfile:2: pip install 'torch==2.5.1: not a shell command this reader reads"
    ]


# ---- assemble.py: the origins a target's facts carry ------------------------------------------------


def test_a_requirements_target_says_its_python_and_platform_are_defaults(tmp_path: Path):
    """x__declared_target__mutmut_30 (the python origin upper-cased): what a requirements file does
    not state is said in the report's words, as the runner's Python and a default platform."""
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.5.1\n")
    env, problems = assemble(EnvironmentInputs(requirements=[req], scan=False), Config())
    assert problems == []
    assert env.python == system.python_version()
    assert env.origins["python"] == "the runner's Python (the requirements do not state the target's)"
    assert (
        env.origins["platform"]
        == env.origins["machine"]
        == ("default target platform (the requirements do not state it)")
    )
    assert env.target == f"{req} (1 package)"


def test_a_log_target_without_a_platform_says_the_linux_default(tmp_path: Path):
    """x_assemble__mutmut_79 (origins["XXmachineXX"]): a log that names no platform is read as
    Linux x86_64, and both facts say it is a default, so the machine's origin is not left unset."""
    facts = log_facts("PyTorch version: 2.5.1\nPython version: 3.11.9\n")
    env, _ = assemble(EnvironmentInputs(log=facts, scan=False), Config())
    assert (env.platform, env.machine) == ("linux", "x86_64")
    assert env.origins["platform"] == env.origins["machine"] == "default (the log does not state it)"
    assert "XXmachineXX" not in env.origins
    assert env.origins["python"] == "from the log, line 2"


def test_torchs_cuda_from_a_log_keeps_the_logs_line(tmp_path: Path):
    """x__fill_from_log__mutmut_15 (log.origins["TORCH_CUDA"]: a KeyError): a requirements target
    whose torch has no local label takes the CUDA build from the log, with the log's line."""
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.5.1\n")
    log = log_facts("Traceback\nCUDA used to build PyTorch: 12.1\n")
    env, _ = assemble(EnvironmentInputs(requirements=[req], log=log, scan=False), Config())
    assert env.torch_build is not None and env.torch_build.cuda == "12.1"
    assert env.origins["torch_build"] == "from the log, line 2"


def test_a_logs_driver_fills_gpus_only_where_none_has_a_driver():
    """x__fill_from_log__mutmut_60 (``or``: the log's driver replaced the probe's): under `run`
    this machine's GPUs carry the driver NVML read; a driver line in the log (another host's, an
    older paste) must not overwrite it. Where no GPU has a driver, the log's fills it, and where
    the GPUs are unknown the log's driver is the evidence of a GPU."""
    log = log_facts("| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\n")
    assert log.driver == "535.104.05"
    probed = Environment(gpus=[Gpu("NVIDIA H100 80GB HBM3", "9.0", driver="550.54.15")], gpu_source="nvml")
    assert [gpu.driver for gpu in _fill_from_log(probed, log).gpus] == ["550.54.15"]
    no_driver = Environment(gpus=[Gpu("NVIDIA H100 80GB HBM3", "9.0")], gpu_source="nvml")
    assert [gpu.driver for gpu in _fill_from_log(no_driver, log).gpus] == ["535.104.05"]
    unknown = _fill_from_log(Environment(gpu_source="unknown"), log)
    assert [(gpu.name, gpu.driver) for gpu in unknown.gpus] == [("GPU named in the log", "535.104.05")]
    assert unknown.gpu_source == "from the log, line 1"
    silent = _fill_from_log(
        Environment(gpus=[Gpu("NVIDIA A100", "8.0", driver="550.54.15")]), log_facts("x\n")
    )
    assert [gpu.driver for gpu in silent.gpus] == ["550.54.15"]


def test_features_declared_in_the_pyproject_close_the_list(tmp_path: Path):
    """x__features__mutmut_10 (features = None: env.features was None and every feature question
    crashed): ``[tool.attn-doctor] features`` is the declared list, named as its source."""
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.5.1\n")
    config = Config(features=["flash_attention_2"], path=tmp_path / "pyproject.toml")
    env, _ = assemble(EnvironmentInputs(requirements=[req], scan=False), config)
    source = f"{tmp_path}/pyproject.toml [tool.attn-doctor] features"
    assert env.features.state("flash_attention_2") == (True, f"flash_attention_2 in use: {source}")
    assert env.features.state("flex_attention") == (
        False,
        f"flex_attention not in use: not declared in {source}",
    )


def test_the_project_scan_keeps_its_cache_in_the_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """x__add_project_scan__mutmut_25 (the scan given no cache folder): an unchanged project must
    cost a walk and a stat per file, so the per-file results go to $ATTN_DOCTOR_CACHE/scan."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text('model = load(attn_implementation="flash_attention_2")\n')
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTN_DOCTOR_CACHE", str(cache))
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.5.1\n")
    env, _ = assemble(EnvironmentInputs(requirements=[req], project=project), Config())
    assert env.features.state("flash_attention_2") == (
        True,
        f"flash_attention_2 in use: project scan of {project} (train.py:1)",
    )
    (saved,) = (cache / "scan").glob("*.json")
    assert list(json.loads(saved.read_text())["files"]) == ["train.py"]


# ---- probe.py and gpus.py --------------------------------------------------------------------------


def test_the_probe_counts_this_machines_cpus(tmp_path: Path, no_gpu: None):
    """x_probe_environment__mutmut_66 (cpus= removed): a source build's MAX_JOBS advice sizes
    itself by the host's CPUs, which the probe reads and says it read."""
    env, _ = probe_environment([str(tmp_path)])
    assert env.cpus == system.cpus() and env.cpus is not None
    assert env.origins["cpus"] == env.origins["memory_gb"] == "this machine"
    assert env.memory_gb == system.memory_gb()


@pytest.mark.parametrize(
    ("text", "driver"),
    [
        ("550.54.15", "550.54.15"),
        ("535.104", "535.104"),
        ("[N/A]", None),
        ("", None),
        (None, None),
        ("N/A", None),
    ],
)
def test_a_driver_is_kept_only_in_the_shape_of_a_version(text: str | None, driver: str | None):
    """x__driver__mutmut_3 (``or``: "[N/A]" kept as a driver, None crashed the regex): an
    environment file holds only a numeric driver version; nvidia-smi's "[N/A]" is unknown."""
    assert gpus._driver(text) == driver


def test_nvidia_smi_without_a_driver_version_gives_an_unknown_driver(fake_nvidia_smi):
    """x__driver__mutmut_3 through the real nvidia-smi reader: a "[N/A]" driver cell is unknown."""
    fake_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, [N/A]\nNVIDIA A100-SXM4-80GB, 8.0, 550.54.15")
    assert gpus._from_nvidia_smi() == [
        Gpu("NVIDIA H100 80GB HBM3", "9.0", driver=None),
        Gpu("NVIDIA A100-SXM4-80GB", "8.0", driver="550.54.15"),
    ]


def test_a_hung_nvidia_smi_is_given_up_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """x__query_nvidia_smi__mutmut_5 (timeout=None): nvidia-smi hangs on a wedged driver; the probe
    waits NVIDIA_SMI_TIMEOUT_S and reads no GPU rather than hang the doctor. A real nvidia-smi on
    PATH that answers only after 3 s, with the limit lowered to 0.3 s."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\nimport time\ntime.sleep(3)\nprint('NVIDIA H100 80GB HBM3, 9.0, 550.54.15')\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    monkeypatch.setattr(gpus, "NVIDIA_SMI_TIMEOUT_S", 0.3)
    started = time.monotonic()
    assert gpus._query_nvidia_smi("name,compute_cap,driver_version") is None
    assert time.monotonic() - started < 2.5


# ---- log_facts.py ----------------------------------------------------------------------------------


def test_an_amd_gpu_in_a_log_keeps_its_name_and_gfx_apart():
    """xǁLogFactCollectorǁ_gpus__mutmut_62 (the name was the gfx): the report names the GPU as the
    log wrote it and rules match its gfx target."""
    facts = log_facts("Traceback (most recent call last):\nGPU 0: AMD Instinct MI300X\n")
    assert facts.gpus == [Gpu(name="AMD Instinct MI300X", compute_capability=None, gfx="gfx942")]
    assert facts.gpu_origin == "from the log, line 2"


@pytest.mark.parametrize(
    ("line", "absent"),
    [
        ("ModuleNotFoundError: No module named 'flash_attn'", "flash-attn"),
        ("ModuleNotFoundError: No module named 'flash_attn_2_cuda'", "flash-attn"),
        ("ImportError: No module named 'flash_attn_interface'", "flash-attn-3"),
        ("WARNING: Skipping flash-attn as it is not installed.", "flash-attn"),
    ],
)
def test_a_module_the_log_cannot_import_names_its_distribution_as_absent(line: str, absent: str):
    """xǁLogFactCollectorǁ_read_line__mutmut_14 (_MODULES.get(None)): "No module named X" names an
    import module; the distribution the rules know (flash_attn_2_cuda -> flash-attn) is the one
    the log proves missing, with its line."""
    facts = log_facts(f"Traceback (most recent call last):\n{line}\n")
    assert facts.absent == {absent: "from the log, line 2"}
    assert absent not in facts.packages


# ---- project_scan.py -------------------------------------------------------------------------------


def test_excluded_and_skipped_folders_are_not_entered_for_source_trees(tmp_path: Path):
    """x__subfolders__mutmut_23 (``or``: every folder was entered, excluded or not, node_modules
    too): a flash-attention checkout under an excluded folder or a skipped one is not the
    project's source build."""
    for folder in ("vendor/flash-attention", "node_modules/fa", ".cache/fa", "third_party/flash-attention"):
        (tmp_path / folder / "hopper").mkdir(parents=True)
        (tmp_path / folder / "hopper" / "flash_fwd_kernel_sm90.h").write_text("")
    expected = [
        Hit("source_build", "third_party/flash-attention/hopper/flash_fwd_kernel_sm90.h:1"),
        Hit("flash_attention_3", "third_party/flash-attention/hopper/flash_fwd_kernel_sm90.h:1"),
    ]
    assert ProjectScan(tmp_path, ("vendor",)).source_trees() == expected
    assert ProjectScan(tmp_path, ("vendor/",)).source_trees() == expected
    vendor = [Hit(hit.feature, hit.where.replace("third_party", "vendor")) for hit in expected]
    assert ProjectScan(tmp_path).source_trees() == expected + vendor


# selecting FA2 in transformers is FA2 in use, and flash_attn required (the package must be there)
FA2_HITS = [Hit("flash_attention_2", "train.py:1"), Hit("flash_attn_required", "train.py:1")]


def scan_twice(root: Path, cache: Path) -> tuple[list[Hit], int]:
    result = ProjectScan(root, (), cache).contents()
    return result.hits, result.cached


def test_a_file_changed_at_the_same_size_is_scanned_again(tmp_path: Path):
    """xǁ_Cacheǁget__mutmut_11 (``and`` for the last ``or``: a file of the same size but a new
    mtime kept its old hits): an edit that keeps the file's length (flash_attention_2 ->
    flash_attention_3) must be read again."""
    root, cache = tmp_path / "project", tmp_path / "cache"
    root.mkdir()
    train = root / "train.py"
    train.write_text('load(attn_implementation="flash_attention_2")\n')
    assert scan_twice(root, cache) == (FA2_HITS, 0)
    assert scan_twice(root, cache) == (FA2_HITS, 1)
    before = train.stat()
    train.write_text('load(attn_implementation="flash_attention_3")\n')
    os.utime(train, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    assert train.stat().st_size == before.st_size
    hits, cached = scan_twice(root, cache)
    assert (cached, hits) == (0, [Hit("flash_attention_3", "train.py:1")])


def test_a_cache_entry_whose_hits_are_not_a_list_is_scanned_again(tmp_path: Path):
    """xǁ_Cacheǁget__mutmut_11: an entry of the right size and mtime whose hits are not a list (a
    hand-edited or damaged cache: {"x7": 1} iterates as ("x", 7)) is not believed."""
    root, cache = tmp_path / "project", tmp_path / "cache"
    root.mkdir()
    (root / "train.py").write_text('load(attn_implementation="flash_attention_2")\n')
    scan_twice(root, cache)
    (saved,) = cache.glob("*.json")
    data = json.loads(saved.read_text())
    data["files"]["train.py"][2] = {"x7": 1}
    saved.write_text(json.dumps(data))
    assert scan_twice(root, cache) == (FA2_HITS, 0)


# ---- survivors of the second, fresh sample (seed 2), tested after it was scored ----------------------------


def test_a_log_target_has_its_gpus_unknown_not_absent():
    """x_assemble__mutmut_42 (gpu_source "XXunknownXX"): a log says nothing of the GPUs it did not
    print, so they are unknown ("unknown"), which leaves GPU rules open rather than ruled out."""
    env, _ = assemble(EnvironmentInputs(log=log_facts("PyTorch version: 2.5.1\n"), scan=False), Config())
    assert env.gpu_source == "unknown" and env.gpus == []


def test_a_pin_over_a_cuda_torch_keeps_the_build_and_says_where_it_came_from(tmp_path: Path):
    """x__over__mutmut_10 (``is not None``): a pin with a local label (``+cu121``) sets torch's build
    and names the label as its origin; a pin without one leaves the build to other facts."""
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.5.1\n")
    labelled, _ = assemble(
        EnvironmentInputs(requirements=[req], pins=["torch==2.4.1+cu121"], scan=False), Config()
    )
    assert labelled.torch_build is not None and labelled.torch_build.cuda == "12.1"
    assert labelled.origins["torch_build"] == "the local label of 2.4.1+cu121"


def test_an_unknown_feature_with_no_near_name_gets_no_guess():
    """x_check_feature_name__mutmut_19 (the empty hint became "XXXX")."""
    from attn_doctor.facts.features import FEATURES, check_feature_name

    with pytest.raises(InputError) as error:
        check_feature_name("zzzzzzzz", "--feature")
    assert str(error.value) == f"--feature: unknown feature 'zzzzzzzz': known: {', '.join(FEATURES)}"


def test_an_empty_quoted_conda_item_is_the_empty_string():
    """x__unquoted__mutmut_4 (``len > 2``): '""' is a quoted empty string, not two quote marks."""
    from attn_doctor.facts.sources.conda_env import _unquoted

    assert [_unquoted(v) for v in ('""', "''", '"torch"', " 'x' ", '"', "a")] == [
        "",
        "",
        "torch",
        "x",
        '"',
        "a",
    ]


def test_a_run_line_continued_over_three_lines_reads_every_requirement(tmp_path: Path):
    """x__instructions__mutmut_22 (``pending = `` for ``pending +=``: only the last two lines of a
    continued RUN survived)."""
    facts = dockerfile_facts(
        tmp_path,
        "FROM python:3.11-slim\n"
        "RUN pip install \\\n    torch==2.5.1 \\\n    triton==3.1.0 \\\n    xformers==0.0.28.post3\n",
    )
    assert {name: version for name, (version, _, _) in packages(facts).items()} == {
        "torch": "2.5.1",
        "triton": "3.1.0",
        "xformers": "0.0.28.post3",
    }
