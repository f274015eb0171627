"""Build the one environment every command matches against, from every input kind.

Precedence, first to last (a later step overrides an earlier one):

1. **The base target.** A declared target is the whole target: ``--env-file`` (facts probed on
   another machine), then ``--requirements`` files over it (their packages replace the env
   file's). Without one, the base is **this machine** (or the site-packages of ``--path``).
   The runner's own packages never mix into a declared target: a package it neither states nor
   implies is absent from it, as in pip-audit. What a requirements file cannot state (GPUs,
   driver, CUDA toolkit) is unknown; its platform is Linux and its Python the runner's, and the
   report says so.
   ``--image`` and ``--dockerfile`` declare one too, in layers, top first: each -r file over the
   next, over the Dockerfile's installs, over its FROM image (or --image); a fact a layer states
   wins over the layers below, and ``origins["over: NAME"]`` keeps what it replaced. An image's
   Python is its record's or unknown, and its package list is open (facts/images.py).
   For `explain`, a log is a target too: without a declared one, the base is **the log's stack**
   (facts/log_facts.py: a freeze block, collect_env, wheel names, traceback frames), never this
   machine, whose packages need not be the log's (``--path`` names a machine's site-packages).
   For `run`, the log is this machine's own output: the base is this machine, and the log fills
   only what the probe lacks (the command may run another interpreter than the doctor's).
2. **Pins** (``--pin NAME==VERSION``) replace packages of the base: on their own they mean "this
   machine, with this version instead"; with a declared target they override the file.
3. **The log's facts** fill what the steps above left unknown (a package they do not name, the
   GPUs, driver, Python, toolkit): stated facts never override the user's options.
4. **Target GPUs**: ``--gpu``, else ``[tool.attn-doctor] gpus``, replace the base's GPUs.
5. **Implied facts** (a requirements or log target): the packages its stated releases pin and
   torch's CUDA build, from the release-facts snapshot (facts/implied.py). A probed machine's
   packages (this machine, an env file) are what is installed: nothing is implied there, and a
   mismatch with what a release requires is a finding instead.
6. **Features**: declared (``--feature``, else pyproject, else the env file) close the list;
   evidence from the project scan and from ``--source`` adds features in use, with file:line,
   and the model families the code runs; declared families (``--model``, else pyproject, else
   the env file's) are in use, and the scan's add to them.

Every fact says where it came from: packages their ``origin``, features their source and
evidence, the rest ``Environment.origins``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from attn_doctor.config import Config
from attn_doctor.errors import InputError
from attn_doctor.facts import gpus, system
from attn_doctor.facts.features import FEATURES, MODELS, FeatureFact, FeatureSet
from attn_doctor.facts.model import (
    ABSENT,
    MAYBE,
    OPEN_PACKAGE_LIST,
    REPLACED,
    UNREAD,
    Environment,
    Gpu,
    Package,
    TorchBuild,
    marker_environment,
    torch_build_from_version,
)
from attn_doctor.facts.probe import probe_environment
from attn_doctor.words import counted

if TYPE_CHECKING:  # log_facts reads logs with explain's reader, which imports this module
    from attn_doctor.facts.log_facts import LogFacts
    from attn_doctor.facts.project_scan import ProjectScan
    from attn_doctor.facts.sources.common import Declared


@dataclass
class EnvironmentInputs:
    """What the user said about the target: the options shared by check, explain, fix and report."""

    env_file: Path | None = None
    site_paths: list[Path] = field(default_factory=list)
    requirements: list[Path] = field(default_factory=list)
    pins: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    features: list[str] | None = None
    models: list[str] | None = None  # --model: the model families the code runs
    project: Path | None = None  # --project; default: the git work tree holding the cwd
    scan: bool = True  # --no-scan turns the project scan off
    sources: list[Path] = field(default_factory=list)  # --source: flash-attention checkouts
    python: str | None = None  # --python: the declared target's Python (default: the runner's)
    platform: str | None = None  # --platform: linux[-x86_64|-aarch64], windows, darwin[-arm64]
    log: LogFacts | None = None  # explain: what the log states about its stack
    log_written_here: bool = False  # run: the log is this machine's own output, not another's
    image: str | None = None  # --image: a container image whose contents are known
    dockerfile: Path | None = None  # --dockerfile: its FROM image and pinned installs
    stage: str | None = None  # --stage: the Dockerfile stage (default: the last)
    driver: str | None = None  # --driver: the target GPUs' NVIDIA driver
    nvcc: str | None = None  # --nvcc: the target's CUDA toolkit, "none" for none
    extras: list[str] = field(default_factory=list)  # --extra: optional extras of a pyproject or uv.lock

    @property
    def declares_packages(self) -> bool:
        """Files that state the target's packages: requirements and lock files, a Dockerfile, an image."""
        return bool(self.requirements or self.image or self.dockerfile)

    @property
    def declares_target(self) -> bool:
        return self.env_file is not None or self.declares_packages


def target(
    env_file: Path | None,
    site_paths: list[Path],
    requirements: list[Path],
    pins: list[str],
    gpus: list[str],
    features: list[str] | None,
    project: Path | None,
    no_scan: bool,
    python: str | None,
    platform: str | None,
    sources: list[Path] | None = None,
    image: str | None = None,
    dockerfile: Path | None = None,
    stage: str | None = None,
    models: list[str] | None = None,
    driver: str | None = None,
    nvcc: str | None = None,
    extras: list[str] | None = None,
) -> EnvironmentInputs:
    """The inputs as the commands' options give them (``--no-scan`` and all)."""
    if stage is not None and dockerfile is None:
        raise InputError("--stage", "chooses a stage of --dockerfile, which is not given")
    if extras and not requirements:
        raise InputError(f"--extra {extras[0]}", "chooses an optional extra of a -r file, which is not given")
    return EnvironmentInputs(
        env_file,
        site_paths,
        requirements,
        pins,
        gpus,
        features,
        models,
        project,
        not no_scan,
        sources or [],
        python,
        platform,
        image=image,
        dockerfile=dockerfile,
        stage=stage,
        driver=driver,
        nvcc=nvcc,
        extras=extras or [],
    )


def assemble(inputs: EnvironmentInputs, config: Config) -> tuple[Environment, list[str]]:
    """The environment and one line per problem met on the way (broken installed metadata).

    Raises InputError for a bad input of the user's own (a file, a pin, a GPU, a feature name).
    """
    if (inputs.python or inputs.platform) and not (inputs.declares_target or inputs.log):
        option = "--python" if inputs.python else "--platform"
        raise InputError(option, _not_for_this_machine(inputs))
    if inputs.declares_target and inputs.site_paths:
        raise InputError("--path", "reads installed packages; a declared target (-r, --env-file) has none")
    site_paths = [_site_packages(path) for path in inputs.site_paths]
    problems: list[str] = []
    log_is_target = _log_is_target(inputs)
    if inputs.declares_target:
        env = _declared_target(inputs, problems)
    elif log_is_target:  # (--path names a machine's site-packages: that machine's packages)
        env = Environment(gpu_source="unknown", target="the stack the log states")
        env.origins["packages"] = OPEN_PACKAGE_LIST
        _target_platform(env, inputs)
    else:
        env, problems = probe_environment([str(path) for path, _ in site_paths])
        env.sources += [note for _, note in site_paths if note]
    if inputs.pins:
        env = _with_pins(env, inputs.pins)
    if inputs.log is not None and (log_is_target or inputs.declares_packages or inputs.log_written_here):
        # a probed machine (this one, --path, an env file) has what it has: a log adds nothing,
        # except under `run`, where the command's interpreter may have what the doctor's lacks
        env = _fill_from_log(env, inputs.log)
        if env.platform is None:
            env.platform, env.machine = PLATFORMS["linux"]
            env.origins["platform"] = env.origins["machine"] = "default (the log does not state it)"
    if inputs.declares_packages or log_is_target:
        # an env file is a probed machine: its packages are what is installed
        from attn_doctor.facts.implied import complete
        from attn_doctor.releases.facts import snapshot

        env = complete(env, snapshot())
    targets = inputs.gpus or config.gpus
    if targets:
        source = "--gpu" if inputs.gpus else f"{config.path} [tool.attn-doctor] gpus"
        env.gpus = [gpus.target_gpu(spec, source) for spec in targets]
        env.gpu_source = "target"
    _stated_toolchain(env, inputs, config)
    env.features = ProjectFeatures(inputs, config).over(env.features)
    return env, problems


_DRIVER = re.compile(r"[0-9]{3}(\.[0-9]{1,3}){1,2}")  # 570.86, 580.159.04
_TOOLKIT = re.compile(r"[0-9]{2}\.[0-9]{1,2}(\.[0-9]{1,3})?")  # 12.8, 12.8.93


def _stated_toolchain(env: Environment, inputs: EnvironmentInputs, config: Config) -> None:
    """``--driver`` and ``--nvcc`` (else the pyproject's ``driver`` and ``nvcc``): what a declared
    target cannot probe, stated once instead of left unknown in every CI run. The driver is the
    target GPUs'; "none" for nvcc says the target has no CUDA toolkit (a runtime image)."""
    for option, value in (("--driver", inputs.driver), ("--nvcc", inputs.nvcc)):
        if value is None and getattr(config, option[2:]) is not None:
            value, option = getattr(config, option[2:]), f"{config.path} [tool.attn-doctor] {option[2:]}"
        if value is None:
            continue
        if option.endswith("driver"):
            if not _DRIVER.fullmatch(value):
                raise InputError(f"{option} {value!r}", "expected an NVIDIA driver version such as 570.86.15")
            if not env.gpus:
                raise InputError(f"{option} {value}", "is the driver of the target's GPUs: give --gpu too")
            env.gpus = [replace(gpu, driver=value) for gpu in env.gpus]
            env.origins["driver"] = option
        elif value == "none":
            env.nvcc, env.origins["nvcc"] = None, f"the target ({option} none)"
        elif _TOOLKIT.fullmatch(value):
            env.nvcc, env.origins["nvcc"] = value, option
        else:
            raise InputError(f"{option} {value!r}", "expected a CUDA toolkit version such as 12.8, or none")


def _not_for_this_machine(inputs: EnvironmentInputs) -> str:
    """Why --python and --platform need a declared target, and with --pin the way to one: --pin
    alone changes this machine, whose Python is what it is, so a target of the pins alone is a pin
    file (``check --pin transformers==4.44.0 --python 3.11``)."""
    if not inputs.pins:
        return "describes a declared target (-r, --env-file); this machine is probed"
    pins = " ".join(shlex.quote(pin) for pin in inputs.pins)
    write = f"echo {pins}" if len(inputs.pins) == 1 else f"printf '%s\\n' {pins}"
    given = [("--python", inputs.python), ("--platform", inputs.platform)]
    options = " ".join(f"{option} {shlex.quote(value)}" for option, value in given if value)
    return (
        "describes a declared target (-r, --env-file); --pin alone changes this machine, which is "
        f"probed: to check the pins alone, {write} > pins.txt and give -r pins.txt {options}"
    )


def _declared_target(inputs: EnvironmentInputs, problems: list[str]) -> Environment:
    """The env file, requirements files, Dockerfile and image, in layers: each -r file over the next,
    the first over the Dockerfile's installs, those over its FROM image (or --image). A layer's
    fact wins over those below, which -v shows; lines a reader does not understand go to
    ``problems``."""
    from attn_doctor.facts import whatif  # packaging's requirement parser: only for declared inputs
    from attn_doctor.facts.sources import read_declared
    from attn_doctor.facts.sources.common import Declared

    is_image = inputs.image is not None or inputs.dockerfile is not None
    if inputs.env_file is not None:
        env = whatif.load_environment_file(inputs.env_file, "--env-file")
    else:
        # an image's Python is its own: unknown where its record does not state it
        runner = {"python": "the runner's Python (the requirements do not state the target's)"}
        unstated = "the image does not state it" if is_image else "the requirements do not state it"
        env = Environment(
            python=None if is_image else system.python_version(),
            platform="linux",
            machine="x86_64",
            gpu_source="unknown",
            origins={
                **({} if is_image else runner),
                "platform": f"default target platform ({unstated})",
                "machine": f"default target platform ({unstated})",
            },
        )
    _target_platform(env, inputs)
    image = _image_layers(inputs, env)
    if image.python and not inputs.python:  # what the -r files' markers are read for
        env.python, env.origins["python"] = image.python
    declared = Declared()
    for path in inputs.requirements:
        declared.merge(read_declared(path, marker_environment(env), extras=frozenset(inputs.extras)))
    for name, extra in declared.optional.items():
        env.origins.setdefault(MAYBE + name, f"installed only with {extra}")
    if unknown := sorted(set(inputs.extras) - declared.extras):
        defined = ", ".join(sorted(declared.extras)) or "none"
        raise InputError(f"--extra {unknown[0]}", f"no -r file defines this extra (they define: {defined})")
    declared.merge(image)
    problems += declared.problems
    given = [str(path) for path in (*inputs.requirements, inputs.dockerfile) if path is not None]
    given += [inputs.image] if inputs.image else []
    if given:
        names = ", ".join(given)
        env.sources = [*env.sources, f"--requirements {names}"]
        packages = counted(len(declared.packages), "package")
        env.target = f"{names} ({packages})" if inputs.env_file is None else env.target
        env = _over(env, declared.packages)
        _conda_facts(env, declared, inputs)
        if declared.open_package_list:
            env.origins["packages"] = declared.open_package_list
        for name, origin in declared.absent.items():  # uninstalled (pip uninstall in a Dockerfile)
            if name not in env.packages:
                env.origins[ABSENT + name] = origin
        for fact, statements in declared.replaced.items():
            env.origins[REPLACED + fact] = "\n".join(statements)
    return env


def _image_layers(inputs: EnvironmentInputs, env: Environment) -> Declared:
    """The Dockerfile's installs over its FROM image, over --image: the bottom of the target."""
    from attn_doctor.facts.sources import read_dockerfile, read_image
    from attn_doctor.facts.sources.common import Declared

    layers = Declared()
    if inputs.dockerfile is not None:
        built = read_dockerfile(inputs.dockerfile, marker_environment(env), inputs.stage)
        # a line not read is not a wrong input: its installs are unknown (the package list is
        # open), the report notes the line, and the exit code is the findings'
        for line in built.problems:
            where, _, what = line.partition(": ")
            known = env.origins.get(UNREAD + where)
            env.origins[UNREAD + where] = what if known is None else f"{known}\n{what}"  # one a line
        built.problems = []
        layers.merge(built)
    if inputs.image is not None:
        layers.merge(read_image(inputs.image))
    return layers


def _conda_facts(env: Environment, declared: Declared, inputs: EnvironmentInputs) -> None:
    """What a conda file or an image states beyond packages: torch's CUDA (pytorch-cuda, a build
    string, the image's), the Python and a CUDA devel image's nvcc; the options (--python) win."""
    if declared.torch_cuda and "torch" in env.packages:
        env.torch_build = TorchBuild(cuda=declared.torch_cuda[0])
        env.origins["torch_build"] = declared.torch_cuda[1]
    if declared.nvcc and env.nvcc is None:  # a CUDA devel image's toolkit
        env.nvcc, env.origins["nvcc"] = declared.nvcc
    if declared.python and inputs.python:
        declared.replaces("python", *declared.python)
    elif declared.python:
        env.python = declared.python[0]
        env.origins["python"] = declared.python[1]


PLATFORMS = {
    "linux": ("linux", "x86_64"),
    "linux-x86_64": ("linux", "x86_64"),
    "linux-aarch64": ("linux", "aarch64"),
    "windows": ("windows", "AMD64"),
    "windows-amd64": ("windows", "AMD64"),
    "darwin": ("darwin", "arm64"),
    "darwin-arm64": ("darwin", "arm64"),
    "darwin-x86_64": ("darwin", "x86_64"),
}


def _target_platform(env: Environment, inputs: EnvironmentInputs) -> None:
    """``--python`` and ``--platform``: what markers in the target's requirements are read for."""
    if inputs.python is not None:
        if not re.fullmatch(r"3\.[0-9]{1,2}(\.[0-9]{1,2})?", inputs.python):  # ASCII: \d takes "٣"
            raise InputError(
                f"--python {inputs.python!r}", "expected a Python version such as 3.11 or 3.12.4"
            )
        env.python, env.origins["python"] = inputs.python, "--python"
    if inputs.platform is not None:
        if inputs.platform not in PLATFORMS:
            raise InputError(f"--platform {inputs.platform!r}", f"expected one of {', '.join(PLATFORMS)}")
        env.platform, env.machine = PLATFORMS[inputs.platform]
        env.origins["platform"] = env.origins["machine"] = "--platform"


def _fill_from_log(env: Environment, log: LogFacts) -> Environment:
    """The log's facts where the target leaves a gap."""
    env = _over(env, {name: p for name, p in log.packages.items() if name not in env.packages})
    if log.torch_cuda and env.torch_build is None:
        env.torch_build = TorchBuild(cuda=log.torch_cuda)
        env.origins["torch_build"] = log.origins["torch_cuda"]
    for fact in ("python", "platform", "nvcc"):
        value = getattr(log, fact)
        if value is not None and getattr(env, fact) is None:
            setattr(env, fact, value)
            env.origins[fact] = log.origins[fact]
    if not env.gpus and env.gpu_source == "unknown" and (log.gpus or log.driver):
        env.gpus = log.gpus or [Gpu(name="GPU named in the log", compute_capability=None)]
        env.gpu_source = log.gpu_origin or log.origins["driver"]
    if log.driver and not any(gpu.driver for gpu in env.gpus):
        env.gpus = [replace(gpu, driver=log.driver) for gpu in env.gpus]
    for name, origin in log.absent.items():
        if name not in env.packages:
            env.origins[ABSENT + name] = origin
    if log.packages or log.gpus:
        env.sources = [*env.sources, "the log"]
    return env


def _with_pins(env: Environment, pins: list[str]) -> Environment:
    from attn_doctor.facts import whatif

    pinned: dict[str, Package] = {}
    for pin in pins:
        package = whatif.parse_pin(pin)
        pinned[package.name] = package
    env = _over(env, pinned)
    env.sources = [*env.sources, "--pin " + " ".join(pins)]
    env.target = f"{env.target}, with --pin {' '.join(pins)}"
    return env


def _over(env: Environment, packages: dict[str, Package]) -> Environment:
    """``packages`` replace those of the same name; a torch with a local label sets the build."""
    build, origins = env.torch_build, dict(env.origins)
    if "torch" in packages:
        build = torch_build_from_version(packages["torch"].version)
        if build is None:
            origins.pop("torch_build", None)
        else:
            origins["torch_build"] = f"the local label of {packages['torch'].version}"
    return replace(env, packages={**env.packages, **packages}, torch_build=build, origins=origins)


class ProjectFeatures:
    """What the options and the project say about the code (step 6): laid over one environment's
    own features by `check`, and by `merge` over each node's, the project scanned once for all."""

    def __init__(self, inputs: EnvironmentInputs, config: Config) -> None:
        self.inputs, self.config = inputs, config
        self.scan = _project_scan(inputs, config)

    def over(self, base: FeatureSet) -> FeatureSet:
        """``base`` (an env file's features) with the declared list, ``--source``, the log's calls
        and the project scan; a declared list replaces ``base``."""
        inputs = self.inputs
        declared = self._declared("features", "--feature")
        features = base if declared is None else FeatureSet.declare(*declared)
        if (models := self._declared("models", "--model")) is not None:
            features.declare_models(*models)
        for checkout in inputs.sources:
            features.add(FeatureFact("source_build", True, "--source", (str(checkout),)))
        for name, line in (inputs.log.features if inputs.log is not None else {}).items():
            features.add(FeatureFact(name, True, "from the log", (f"line {line}",)))  # a call it shows
        if self.scan is not None:
            _add_project_scan(self.scan, features)
            # the project's tree says whether it builds from source, unless the log comes from elsewhere
            features.searched = features.searched or not _log_is_target(inputs)
        return features

    def _declared(self, key: str, option: str) -> tuple[list[str], str] | None:
        """The list the user declared for ``key`` (features, models) and where: the option, else
        the pyproject's ``[tool.attn-doctor]`` key; None when neither gives one."""
        names: list[str] | None = getattr(self.inputs, key)
        if names is not None:
            return names, option
        names = getattr(self.config, key)
        if names is not None:
            return names, f"{self.config.path} [tool.attn-doctor] {key}"
        return None


def _log_is_target(inputs: EnvironmentInputs) -> bool:
    """explain on a log with no target of its own: the stack is the one the log states."""
    return inputs.log is not None and not (
        inputs.declares_target or inputs.site_paths or inputs.log_written_here
    )


def _project_scan(inputs: EnvironmentInputs, config: Config) -> ProjectScan | None:
    """The project's scan, not yet run (None: --no-scan or ``scan = false``)."""
    if not (inputs.scan and config.scan):
        return None
    from attn_doctor.facts.cache import cache_folder
    from attn_doctor.facts.project_scan import ProjectScan, project_root

    root = inputs.project if inputs.project is not None else project_root(Path.cwd())
    if not root.is_dir():
        raise InputError(f"--project {root}", "not a folder")
    folder = cache_folder()
    return ProjectScan(root, tuple(config.exclude), None if folder is None else folder / "scan")


def _add_project_scan(scan: ProjectScan, features: FeatureSet) -> None:
    """The project scan, run when a feature's use (or a model family) is first asked: a machine
    where no rule needs one (another condition already rules it out) reads no file. Whether a
    flash-attention source tree is there needs only the walk, not the contents."""
    from attn_doctor.facts.project_scan import SOURCE_TREE_FEATURES, Hit

    source = f"project scan of {scan.root}"

    def facts(hits: list[Hit], scoped: bool) -> list[FeatureFact]:
        return [FeatureFact(hit.feature, True, source, (hit.where,), scoped) for hit in hits]

    def contents_facts() -> list[FeatureFact]:
        found = scan.contents()
        features.add_scopes(found.scopes)
        return facts(found.hits, scoped=True)

    # a source tree is the build's, whatever code path runs: it holds everywhere
    features.add_later(lambda: facts(scan.source_trees(), scoped=False), SOURCE_TREE_FEATURES)
    contents = frozenset(FEATURES) - {"source_build"} | {MODELS}
    features.add_later(contents_facts, contents)


def _site_packages(path: Path) -> tuple[Path, str]:
    """``--path``: a site-packages folder, or a virtual environment's root (its site-packages is
    used, and the report says so). Anything else is an InputError: a typo must not read as
    "nothing installed"."""
    source = f"--path {path}"
    if not path.exists():
        raise InputError(source, "no such folder")
    if not path.is_dir():
        raise InputError(source, "not a folder (give a site-packages folder or a virtual environment)")
    if (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir():
        found = sorted(path.glob("lib/python3*/site-packages")) + sorted(path.glob("Lib/site-packages"))
        if not found:
            raise InputError(source, "a virtual environment without lib/python3*/site-packages")
        return found[-1], f"the site-packages of the environment {path}"
    return path, ""
