"""Command-line wiring: parse options, call the library, print, exit. No logic lives here.

Exit codes: 0 clean, 1 findings at or above --fail-on, 2 usage or input error, 3 internal error.

No ``from __future__ import annotations`` here: typer reads every command's annotations on each
run, and as strings it would compile and evaluate each of them twice (a third of building the app).
"""

import contextlib
import functools
import io
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, Protocol, TypeVar, cast

import typer
from typer.core import TyperGroup

from attn_doctor import __version__
from attn_doctor.errors import InputError

if TYPE_CHECKING:
    from attn_doctor.facts.assemble import EnvironmentInputs

EXIT_INPUT_ERROR, EXIT_INTERNAL_ERROR = 2, 3
MAX_ERROR_CHARS = 500
MAX_TIMEOUT_S = 7 * 24 * 3600  # a week: longer is a typo (1e308), and past ~9.2e9 s waits overflow
FORMATS = ("rich", "json", "markdown", "sarif", "junit", "github", "gitlab", "npd", "prometheus", "verdict")

# click's errors' base class, ClickException: typer vendors click in its later releases and imports
# it in earlier ones, and exports it from neither
_CLICK_ERROR: type[Exception] = next(k for k in typer.BadParameter.__mro__ if k.__name__ == "ClickException")


class _ClickError(Protocol):
    exit_code: int

    def show(self, file: IO[Any] | None = None) -> None: ...


@contextlib.contextmanager
def _fitted_click_errors() -> Iterator[None]:
    """click's own usage errors (a bad option value, an unknown option) fitted to stderr's width, as
    ours are: click prints its error line whole, whatever the width."""
    try:
        yield
    except _CLICK_ERROR as caught:
        from attn_doctor.report import width

        error, shown = cast(_ClickError, caught), io.StringIO()
        error.show(shown)
        width.write(shown.getvalue(), sys.stderr)
        raise typer.Exit(error.exit_code) from None


class _FittedErrorsGroup(TyperGroup):
    """The command group whose parsing (every subcommand's too) reports errors fitted."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _fitted_click_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        with _fitted_click_errors():
            return super().invoke(*args, **kwargs)


app = typer.Typer(
    cls=_FittedErrorsGroup,
    rich_markup_mode=None,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="A doctor for the PyTorch attention stack.",
)
rules_app = typer.Typer(
    rich_markup_mode=None, no_args_is_help=True, help="List, show and validate the rules database."
)
app.add_typer(rules_app, name="rules")
db_app = typer.Typer(
    rich_markup_mode=None, no_args_is_help=True, help="The release-facts snapshot the checks read."
)
app.add_typer(db_app, name="db")

F = TypeVar("F", bound=Callable[..., Any])


def _one_line_errors(command: F) -> F:
    """Input errors become one line on stderr and exit 2; anything else one line and exit 3."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            _error(str(exc))
            raise typer.Exit(EXIT_INPUT_ERROR) from None
        except BrokenPipeError:  # the reader went away (| head): quietly, as SIGPIPE would
            from attn_doctor.streams import quiet_broken_pipe

            quiet_broken_pipe()
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the promise is: never a traceback
            _error(_internal_error(exc))
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None

    return wrapper  # type: ignore[return-value]


def _stopped_on_stdout(command: F) -> F:
    """Under _one_line_errors: a --format read by a machine on stdout (npd) says there too why the
    command stopped before a result; the stderr line and the exit code stay _one_line_errors'."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        output_format = str(kwargs.get("output_format"))
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            _write_stopped(output_format, str(exc), EXIT_INPUT_ERROR)
            raise
        except (typer.Exit, typer.Abort, KeyboardInterrupt, BrokenPipeError):
            raise
        except Exception as exc:
            _write_stopped(output_format, _internal_error(exc), EXIT_INTERNAL_ERROR)
            raise

    return wrapper  # type: ignore[return-value]


def _write_stopped(output_format: str, message: str, exit_code: int) -> None:
    from attn_doctor.report import stopped_text

    sys.stdout.write(stopped_text(output_format, message, exit_code))


def _internal_error(exc: Exception) -> str:
    return f"internal error: {type(exc).__name__}: {exc} (please report it)"


def _seconds(value: float) -> float:
    """A timeout: a positive, finite number of seconds (0, -1, nan and inf are typos), at most
    MAX_TIMEOUT_S: the waits it reaches (threading, select) overflow past about 9.2e9 s."""
    if not math.isfinite(value) or value <= 0:
        raise typer.BadParameter(f"{value} is not a positive number of seconds")
    if value > MAX_TIMEOUT_S:
        raise typer.BadParameter(f"{value:g} is over the maximum, {MAX_TIMEOUT_S:,} seconds (a week)")
    return value


def _jobs(value: int) -> int:
    """--jobs: 0 (the default: one per case, at most the CPUs) or a positive count."""
    if value < 0:
        raise typer.BadParameter(f"{value} is not a number of children (0: one per case)")
    return value


def _target(options: dict[str, Any]) -> "EnvironmentInputs":
    """The target options every command shares (``-r``, ``--pin``, ``--image``, ...), read from the
    command's own parameters (``_target(locals())``), as facts.assemble.EnvironmentInputs."""
    from attn_doctor.facts.assemble import target

    return target(
        options["env_file"],
        options["path"],
        [_pin_file(name) for name in options["requirements"]],
        options["pin"],
        options["gpu"],
        options["feature"],
        options["project_path"],
        options["no_scan"],
        options["python"],
        options["target_platform"],
        options.get("source"),
        image=options["image"],
        dockerfile=options["dockerfile"],
        stage=options["stage"],
        models=options["model"],
        driver=options["driver"],
        nvcc=options["nvcc"],
        extras=options["extra"],
    )


def _pin_file(name: str) -> Path:
    if "://" in name:
        raise InputError(f"-r {name}", "URLs are not supported: download the file first")
    return Path(name)


# check, fix and report take options only; a stray word reaches the command, which names the option
# it most likely lacks instead of click's usage block
OPTIONS_ONLY = {"allow_extra_args": True}
_PIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==\S+")


def _no_stray_words(ctx: typer.Context) -> None:
    """A word without an option: most often a pin (``check transformers==4.44.0``), given --pin."""
    if not ctx.args:
        return
    words, command = " ".join(ctx.args), ctx.info_name
    if all(_PIN_WORD.fullmatch(word) for word in ctx.args):
        pins = " ".join(f"--pin {shlex.quote(word)}" for word in ctx.args)
        raise InputError(words, f"{command} takes options only; did you mean {pins}?")
    raise InputError(words, f"{command} takes options only, no arguments (attn-doctor {command} --help)")


def _require_choice(option: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise InputError(option, f"{value!r} is not one of {', '.join(choices)}")


def _error(message: str) -> None:
    """One line on stderr, wrapped with indented continuations where it would pass the terminal's
    width; an input echoed in it (a 100,000-character argument) is cut short."""
    from attn_doctor.report import width

    line = " ".join(message.split())
    if len(line) > MAX_ERROR_CHARS:
        line = f"{line[: MAX_ERROR_CHARS - 40]} ... ({len(line):,} characters)"
    width.write(f"attn-doctor: error: {line}\n", sys.stderr)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attn-doctor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
) -> None:
    """A doctor for the PyTorch attention stack."""


GpuOption = Annotated[
    list[str],
    typer.Option(
        "--gpu", help="Target GPU instead of this machine's (repeatable): sm_90, 9.0, H100, A100, L4, ..."
    ),
]
DriverOption = Annotated[
    str | None,
    typer.Option("--driver", help="The target GPUs' NVIDIA driver, e.g. 570.86.15 (with --gpu)."),
]
NvccOption = Annotated[
    str | None,
    typer.Option("--nvcc", help="The target's CUDA toolkit (nvcc), e.g. 12.8, or none."),
]
ExtraOption = Annotated[
    list[str],
    typer.Option("--extra", help="An optional extra of a pyproject.toml or uv.lock to install (repeatable)."),
]
PinOption = Annotated[list[str], typer.Option("--pin", help="NAME==VERSION to assume (repeatable).")]
RequirementsOption = Annotated[
    list[str],  # str, not Path: a Path would fold a URL's "//" before we can refuse it
    typer.Option(
        "--requirements",
        "-r",
        help="A pin file: requirements, pip freeze, uv.lock, poetry.lock, pylock.toml, Pipfile.lock, "
        "environment.yml, conda list, pyproject.toml, Dockerfile (repeatable).",
    ),
]
ImageOption = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="The target is this container image: nvcr.io/nvidia/pytorch:YY.MM-py3, pytorch/pytorch:TAG.",
    ),
]
DockerfileOption = Annotated[
    Path | None,
    typer.Option(
        "--dockerfile", help="The target is what this Dockerfile builds: its FROM image and pinned installs."
    ),
]
StageOption = Annotated[
    str | None, typer.Option("--stage", help="The Dockerfile stage to read (default: the last).")
]
EnvFileOption = Annotated[
    Path | None,
    typer.Option("--env-file", help="Facts from `attn-doctor probe --json` on another machine."),
]
FeatureOption = Annotated[
    list[str] | None,
    typer.Option("--feature", help="A feature in use (repeatable): flash_attention_2, flex_attention, ..."),
]
ModelOption = Annotated[
    list[str] | None,
    typer.Option("--model", help="A model family the code runs (repeatable): llama, gemma2, qwen2, ..."),
]
PathOption = Annotated[
    list[Path],
    typer.Option(
        "--path", help="Look for installed packages only in this site-packages folder (repeatable)."
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="pyproject.toml with [tool.attn-doctor] (default: the nearest one)."),
]
RulesOption = Annotated[
    list[Path],
    typer.Option("--rules", help="Extra rule files or folders, read with the database (repeatable)."),
]
ProjectOption = Annotated[
    Path | None,
    typer.Option(
        "--project", help="Scan this project for the features it uses (default: the git work tree here)."
    ),
]
NoScanOption = Annotated[
    bool, typer.Option("--no-scan", help="Do not scan the project; only declared features and models count.")
]
PythonOption = Annotated[
    str | None, typer.Option("--python", help="A declared target's Python, e.g. 3.12 (default: this one's).")
]
PlatformOption = Annotated[
    str | None,
    typer.Option(
        "--platform", help="A declared target's platform: linux (default), linux-aarch64, windows, darwin."
    ),
]
ProbeTimeoutOption = Annotated[
    float, typer.Option("--probe-timeout", callback=_seconds, help="Seconds before a probe counts as hung.")
]


@app.command(
    short_help="Check this machine, or a target, against known-bad stacks.", context_settings=OPTIONS_ONLY
)
@_one_line_errors
@_stopped_on_stdout
def check(
    ctx: typer.Context,
    gpu: GpuOption = [],  # noqa: B006 - typer reads the default, never mutates it
    driver: DriverOption = None,
    nvcc: NvccOption = None,
    pin: PinOption = [],  # noqa: B006
    requirements: RequirementsOption = [],  # noqa: B006
    extra: ExtraOption = [],  # noqa: B006
    image: ImageOption = None,
    dockerfile: DockerfileOption = None,
    stage: StageOption = None,
    env_file: EnvFileOption = None,
    path: PathOption = [],  # noqa: B006
    feature: FeatureOption = None,
    model: ModelOption = None,
    config: ConfigOption = None,
    project_path: ProjectOption = None,
    no_scan: NoScanOption = False,
    python: PythonOption = None,
    target_platform: PlatformOption = None,
    rules: RulesOption = [],  # noqa: B006
    output_format: Annotated[
        str, typer.Option("--format", "-f", help=f"One of {', '.join(FORMATS)}.")
    ] = "rich",
    fail_on: Annotated[
        str | None,
        typer.Option("--fail-on", help="Lowest severity that fails: error (default), warning, info, never."),
    ] = None,
    fail_on_unknown: Annotated[
        bool, typer.Option("--fail-on-unknown", help="Unknown verdicts fail too (strict CI).")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show facts and why each rule matched.")
    ] = False,
    live_probes: Annotated[
        bool,
        typer.Option("--probe", help="Also run the live probes: the installed libraries' own code paths."),
    ] = False,
    probe_timeout: ProbeTimeoutOption = 120.0,
    source: Annotated[
        list[Path],
        typer.Option("--source", help="Scan a flash-attention checkout before building it (repeatable)."),
    ] = [],  # noqa: B006
    distributed: Annotated[
        bool,
        typer.Option(
            "--distributed", help="Under torchrun or srun: one report of every rank's facts, on rank 0."
        ),
    ] = False,
    distributed_timeout: Annotated[
        float,
        typer.Option(
            "--distributed-timeout", callback=_seconds, help="Seconds rank 0 waits for the other ranks."
        ),
    ] = 60.0,
) -> None:
    """Check this machine (or a target) against the rules database of known-bad combinations."""
    started = time.monotonic()  # --format prometheus reports the check's duration
    from attn_doctor import check as checking
    from attn_doctor.config import FAIL_ON_LEVELS, project_config
    from attn_doctor.engine.loader import database_path, load_rules
    from attn_doctor.facts.assemble import assemble
    from attn_doctor.progress import Progress

    _no_stray_words(ctx)
    _require_choice("--format", output_format, FORMATS)
    _require_choice("--fail-on", fail_on, FAIL_ON_LEVELS)
    project = project_config(config, project_path)
    inputs = _target(locals())
    env, fact_problems = assemble(inputs, project)
    ruleset = load_rules([database_path(), *rules], trust_database=True)
    if distributed:
        from attn_doctor.cluster.session import distributed_check

        _cluster_formats(output_format)
        cluster = distributed_check(env, ruleset, project, fail_on, fail_on_unknown, distributed_timeout)
        if cluster is not None:  # rank 0 reports; the other ranks only sent their facts
            _print_cluster(cluster, output_format)
        raise typer.Exit(0 if cluster is None else cluster.exit_code)
    result = checking.checkup(
        env,
        fact_problems,
        ruleset,
        project,
        fail_on,
        fail_on_unknown,
        live_probes,
        source,
        probe_timeout,
        Progress(live=_live_progress(output_format), verbose=verbose),
        started,
    )
    exit_code = _print_report(result, output_format, verbose)
    for problem in result.problems:
        _error(problem)
    raise typer.Exit(exit_code)


def _print_report(result: Any, output_format: str, verbose: bool) -> int:
    """Print the report; the exit code its format gives it."""
    if output_format != "rich":
        from attn_doctor.report import machine_format

        chosen = machine_format(output_format)
        sys.stdout.write(chosen.render(result))
        return int(chosen.exit_code(result))
    from attn_doctor.report.text import fitted, plain, render_lines
    from attn_doctor.report.width import terminal_width

    lines = fitted(render_lines(result, verbose), terminal_width())
    if _colour():
        from rich.console import Console
        from rich.text import Text

        console = Console(highlight=False, soft_wrap=True)
        for text, style in lines:
            console.print(Text(text, style=style))
    else:
        sys.stdout.write(plain(lines))
    return int(result.exit_code)


def _live_progress(output_format: str) -> bool:
    """Spinners only for a person at a terminal reading the human report."""
    return output_format == "rich" and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def _colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


@app.command(short_help="Print this machine's facts (no diagnosis).")
@_one_line_errors
def probe(
    path: PathOption = [],  # noqa: B006
    json_output: Annotated[
        bool, typer.Option("--json", help="Facts as JSON, the input of --env-file.")
    ] = False,
) -> None:
    """Print this machine's facts (no diagnosis)."""
    from attn_doctor.facts.probe import probe_environment

    env, problems = probe_environment([str(p) for p in path])
    if json_output:
        sys.stdout.write(env.to_json() + "\n")
    else:
        from attn_doctor.report.text import fact_lines, plain
        from attn_doctor.report.width import terminal_width

        sys.stdout.write(plain(fact_lines(env), terminal_width()))
    for problem in problems:
        _error(problem)
    raise typer.Exit(EXIT_INPUT_ERROR if problems else 0)


@app.command(short_help="One cluster report from per-node probe files.")
@_one_line_errors
def merge(
    files: Annotated[list[Path], typer.Argument(help="Per-node `attn-doctor probe --json` files.")],
    feature: FeatureOption = None,
    model: ModelOption = None,
    config: ConfigOption = None,
    project_path: ProjectOption = None,
    no_scan: NoScanOption = False,
    rules: RulesOption = [],  # noqa: B006
    output_format: Annotated[str, typer.Option("--format", "-f", help="rich or json.")] = "rich",
    fail_on: Annotated[
        str | None, typer.Option("--fail-on", help="error (default), warning, info, never.")
    ] = None,
    fail_on_unknown: Annotated[bool, typer.Option("--fail-on-unknown")] = False,
) -> None:
    """One cluster report from per-node probe files: findings per node and drift between nodes.
    What the code uses comes from this project, as for `check --env-file` on each node."""
    from attn_doctor.cluster.session import merge_files
    from attn_doctor.config import FAIL_ON_LEVELS, project_config
    from attn_doctor.engine.loader import database_path, load_rules
    from attn_doctor.facts.assemble import EnvironmentInputs, ProjectFeatures

    _cluster_formats(output_format)
    _require_choice("--fail-on", fail_on, FAIL_ON_LEVELS)
    project = project_config(config, project_path)
    inputs = EnvironmentInputs(features=feature, models=model, project=project_path, scan=not no_scan)
    code = ProjectFeatures(inputs, project)
    ruleset = load_rules([database_path(), *rules], trust_database=True)
    cluster = merge_files(files, code, ruleset, project, fail_on, fail_on_unknown)
    _print_cluster(cluster, output_format)
    raise typer.Exit(cluster.exit_code)


def _cluster_formats(output_format: str) -> None:
    if output_format not in ("rich", "json"):
        raise InputError("--format", f"{output_format!r}: a cluster report is rich or json")


def _print_cluster(cluster: Any, output_format: str) -> None:
    from attn_doctor.report import cluster_report
    from attn_doctor.report.width import terminal_width

    if output_format == "json":
        sys.stdout.write(cluster_report.to_json(cluster))
    else:
        sys.stdout.write(cluster_report.to_text(cluster, terminal_width()))
    for line in [*cluster.missing, *cluster.problems]:
        _error(line)


@app.command(short_help="Reproduce a known bug, each case in its own process.")
@_one_line_errors
def repro(
    issue: Annotated[
        str | None, typer.Argument(help="A rule id, a repro id, an upstream issue URL or owner/repo#N.")
    ] = None,
    list_repros: Annotated[bool, typer.Option("--list", help="List the bundled reproductions.")] = False,
    run_all: Annotated[bool, typer.Option("--all", help="Run every reproduction.")] = False,
    case: Annotated[str | None, typer.Option("--case", help="Run only this case.")] = None,
    device: Annotated[
        str, typer.Option("--device", help="auto (a GPU if NVML sees one), cuda or cpu.")
    ] = "auto",
    sanitizer: Annotated[
        bool, typer.Option("--sanitizer", help="Run children under compute-sanitizer memcheck (GPU).")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", callback=_seconds, help="Seconds before a child counts as hung.")
    ] = 300.0,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs", "-j", callback=_jobs, help="Children at a time (default: one per case, <= CPUs)."
        ),
    ] = 0,
    output_format: Annotated[str, typer.Option("--format", "-f", help="rich, json or markdown.")] = "rich",
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Each case's wall time, and how children were started.")
    ] = False,
) -> None:
    """Reproduce a known bug with the bundled reference kernels, each case in its own process."""
    from attn_doctor.engine.loader import load_rules
    from attn_doctor.progress import Progress
    from attn_doctor.report.repro_report import nothing_ran, skip_reasons
    from attn_doctor.repro import catalogue
    from attn_doctor.repro.session import plan, run_plan

    if list_repros:
        from attn_doctor.report.repro_report import listing
        from attn_doctor.report.width import terminal_width

        sys.stdout.write(listing(catalogue.REPROS, load_rules(), terminal_width()))
        return
    _require_choice("--format", output_format, ("rich", "json", "markdown"))
    if not run_all and issue is None:
        raise InputError(
            "repro", "name an issue (rule id, repro id, URL, owner/repo#N), or use --all / --list"
        )
    work, probes = plan(None if run_all else issue, case, load_rules())
    results, text = run_plan(
        work,
        probes,
        device=device,
        sanitizer=sanitizer,
        timeout_s=timeout,
        jobs=jobs,
        output_format=output_format,
        progress=Progress(live=_live_progress(output_format), verbose=verbose),
    )
    sys.stdout.write(text)
    if nothing_ran(results):
        ran = "repro --all" if run_all else f"repro {issue}"
        every = f"all {len(results)} cases were" if len(results) > 1 else "its one case was"
        raise InputError(ran, f"nothing ran: {every} skipped ({skip_reasons(results)})")
    raise typer.Exit(0 if all(r.as_expected for r in results) else 1)


@app.command(short_help="Markdown for a GitHub issue, secrets left out.", context_settings=OPTIONS_ONLY)
@_one_line_errors
def report(
    ctx: typer.Context,
    gpu: GpuOption = [],  # noqa: B006
    driver: DriverOption = None,
    nvcc: NvccOption = None,
    pin: PinOption = [],  # noqa: B006
    requirements: RequirementsOption = [],  # noqa: B006
    extra: ExtraOption = [],  # noqa: B006
    image: ImageOption = None,
    dockerfile: DockerfileOption = None,
    stage: StageOption = None,
    env_file: EnvFileOption = None,
    path: PathOption = [],  # noqa: B006
    feature: FeatureOption = None,
    model: ModelOption = None,
    config: ConfigOption = None,
    project_path: ProjectOption = None,
    no_scan: NoScanOption = False,
    python: PythonOption = None,
    target_platform: PlatformOption = None,
    live_probes: Annotated[
        bool, typer.Option("--probe", help="Also run the live probes (as check --probe).")
    ] = False,
    probe_timeout: ProbeTimeoutOption = 120.0,
    repro_json: Annotated[
        Path | None, typer.Option("--repro-json", help="Include results saved by `repro --format json`.")
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here, not to stdout.")] = None,
) -> None:
    """Markdown for a GitHub issue: facts, findings, commands to reproduce; secrets left out."""
    from attn_doctor import check as checking
    from attn_doctor.config import project_config
    from attn_doctor.engine.loader import load_rules
    from attn_doctor.facts.assemble import assemble
    from attn_doctor.report.issue import IssueInputs, render
    from attn_doctor.report.repro_file import load_repro_results

    _no_stray_words(ctx)
    what_if = _target(locals())
    repro_results = [] if repro_json is None else load_repro_results(repro_json)
    inputs = IssueInputs(what_if, config, live_probes, repro_json, repro_results)
    project = project_config(config, project_path)
    env, fact_problems = assemble(what_if, project)
    result = checking.checkup(
        env, fact_problems, load_rules(), project, live=live_probes, probe_timeout_s=probe_timeout
    )
    from attn_doctor.report.width import terminal_width

    text = render(result, inputs, os.environ, terminal_width() if output is None else None)
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise InputError(str(output), exc.strerror or "cannot write") from None
    for problem in result.problems:
        _error(problem)
    raise typer.Exit(EXIT_INPUT_ERROR if result.problems else 0)


@app.command(short_help="The fewest version changes that clear the findings.", context_settings=OPTIONS_ONLY)
@_one_line_errors
def fix(
    ctx: typer.Context,
    gpu: GpuOption = [],  # noqa: B006
    driver: DriverOption = None,
    nvcc: NvccOption = None,
    pin: PinOption = [],  # noqa: B006
    requirements: RequirementsOption = [],  # noqa: B006
    extra: ExtraOption = [],  # noqa: B006
    image: ImageOption = None,
    dockerfile: DockerfileOption = None,
    stage: StageOption = None,
    env_file: EnvFileOption = None,
    path: PathOption = [],  # noqa: B006
    feature: FeatureOption = None,
    model: ModelOption = None,
    config: ConfigOption = None,
    project_path: ProjectOption = None,
    no_scan: NoScanOption = False,
    python: PythonOption = None,
    target_platform: PlatformOption = None,
    rules: RulesOption = [],  # noqa: B006
    fail_on: Annotated[
        str | None,
        typer.Option("--fail-on", help="Lowest severity to clear: error (default), warning, info."),
    ] = None,
    output_format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the versions as a constraints file.")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also say why each alternative was not proposed.")
    ] = False,
) -> None:
    """The fewest version changes that clear the failing findings, as a pip command. Installs nothing."""
    from attn_doctor.config import FAIL_ON_LEVELS, project_config
    from attn_doctor.fixer.plan import run_fix
    from attn_doctor.report import fix_report
    from attn_doctor.report.width import terminal_width

    _no_stray_words(ctx)
    _require_choice("--format", output_format, ("text", "json"))
    _require_choice("--fail-on", fail_on, FAIL_ON_LEVELS)
    project = project_config(config, project_path)
    inputs = _target(locals())
    # the search's progress on a terminal, for the human report (text here, "rich" in _live_progress)
    plan = run_fix(inputs, project, rules, fail_on, live=output_format == "text" and _live_progress("rich"))
    if output is not None:
        fix_report.write_constraints(plan, output)
    sys.stdout.write(fix_report.render(plan, output_format, output, verbose, terminal_width()))
    for problem in plan.before.problems:
        _error(problem)
    raise typer.Exit(plan.exit_code)


WHEEL_PACKAGES = "torch, triton, flash-attn, flash-attn-3, xformers, flash-linear-attention"


@app.command(short_help="Which wheel fits the stack, as one install command.")
@_one_line_errors
def wheel(
    packages: Annotated[
        list[str],
        typer.Argument(
            help="torch, triton, flash-attn, flash-attn-3, xformers, flash-linear-attention",
            show_default=False,
        ),
    ],
    gpu: GpuOption = [],  # noqa: B006
    driver: DriverOption = None,
    nvcc: NvccOption = None,
    pin: PinOption = [],  # noqa: B006
    requirements: RequirementsOption = [],  # noqa: B006
    extra: ExtraOption = [],  # noqa: B006
    image: ImageOption = None,
    dockerfile: DockerfileOption = None,
    stage: StageOption = None,
    env_file: EnvFileOption = None,
    path: PathOption = [],  # noqa: B006
    feature: FeatureOption = None,
    model: ModelOption = None,
    project_path: ProjectOption = None,
    no_scan: NoScanOption = True,
    python: PythonOption = None,
    target_platform: PlatformOption = None,
    output_format: Annotated[
        str,
        typer.Option("--format", "-f", help="text, json or requirements (lines for a requirements file)."),
    ] = "text",
) -> None:
    """For each package, the one command that installs a build fitting the target, and why; when
    none fits, each way out. Installs nothing, needs no network (the release facts)."""
    from packaging.utils import canonicalize_name

    from attn_doctor.config import project_config
    from attn_doctor.facts.assemble import assemble
    from attn_doctor.planner.registry import PLANNERS
    from attn_doctor.planner.stack import plan_stack
    from attn_doctor.releases.facts import snapshot
    from attn_doctor.report import wheel_report
    from attn_doctor.report.width import terminal_width

    _require_choice("--format", output_format, ("text", "json", "requirements"))
    # any spelling pip accepts (PEP 503): flash_attn, Flash-Attn
    names = {package: canonicalize_name(package) for package in packages}
    unknown = [given for given, name in names.items() if name not in PLANNERS]
    if unknown:
        raise InputError(unknown[0], f"no wheel planner for it (planned: {', '.join(PLANNERS)})")
    env, problems = assemble(_target(locals()), project_config(None, project_path))
    facts = snapshot()
    plans = plan_stack(env, facts, dict.fromkeys(names.values()))
    if output_format == "json":
        sys.stdout.write(wheel_report.to_json(env.target, plans))
    elif output_format == "requirements":
        sys.stdout.write(wheel_report.to_requirements(env.target, plans))
    else:
        sys.stdout.write(wheel_report.to_text(env.target, plans, terminal_width()))
    for problem in problems:
        _error(problem)
    raise typer.Exit(0 if all(plan.command for plan in plans) else 1)


@app.command(short_help="Name the known causes of an error in a log.")
@_one_line_errors
def explain(
    log: Annotated[str, typer.Argument(help="A traceback or log file; - (the default) reads stdin.")] = "-",
    gpu: GpuOption = [],  # noqa: B006
    driver: DriverOption = None,
    nvcc: NvccOption = None,
    pin: PinOption = [],  # noqa: B006
    requirements: RequirementsOption = [],  # noqa: B006
    extra: ExtraOption = [],  # noqa: B006
    image: ImageOption = None,
    dockerfile: DockerfileOption = None,
    stage: StageOption = None,
    env_file: EnvFileOption = None,
    path: PathOption = [],  # noqa: B006
    feature: FeatureOption = None,
    model: ModelOption = None,
    config: ConfigOption = None,
    project_path: ProjectOption = None,
    no_scan: NoScanOption = False,
    python: PythonOption = None,
    target_platform: PlatformOption = None,
    rules: RulesOption = [],  # noqa: B006
    output_format: Annotated[str, typer.Option("--format", "-f", help="rich or json.")] = "rich",
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Every fact the log states; why each cause ranks there.")
    ] = False,
) -> None:
    """Name the known causes of an error in a traceback or training log, ranked for this stack.

    Exit codes: 0 a known cause found, 1 none, 2 input error, 3 internal error.
    """
    from attn_doctor.config import project_config
    from attn_doctor.explain import explain as run_explain
    from attn_doctor.report import explain_report

    _require_choice("--format", output_format, ("rich", "json"))
    inputs = _target(locals())
    result = run_explain(log, inputs, project_config(config, project_path), rules)
    if output_format == "json":
        sys.stdout.write(explain_report.to_json(result))
    else:
        from attn_doctor.report import width

        width.write(explain_report.to_text(result, verbose))
    for problem in result.problems:
        _error(problem)
    raise typer.Exit(result.exit_code)


@app.command(
    "run",
    short_help="Run a command; when it fails, diagnose its output.",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def run_wrapped(ctx: typer.Context) -> None:
    """Run a command (`run -- python train.py ...`); when it fails, diagnose its output.

    The output passes through untouched; the exit code is the command's. `attn-doctor run --help`
    lists the options. (The entry point dispatches `run` before this app is even imported.)
    """
    from attn_doctor.wrap import main as run_command

    raise typer.Exit(run_command(list(ctx.args)))


@rules_app.command("list")
@_one_line_errors
def rules_list() -> None:
    """One line per rule: id, severity, component, title."""
    from attn_doctor.engine.loader import load_rules
    from attn_doctor.report import width

    ruleset = load_rules()
    rules = sorted(ruleset.rules, key=lambda r: (r.component, r.id))
    width.write("".join(f"{r.id} [{r.severity}, {r.component}]: {r.title}\n" for r in rules))
    for problem in ruleset.problems:
        _error(problem)
    raise typer.Exit(EXIT_INPUT_ERROR if ruleset.problems else 0)


@rules_app.command("show")
@_one_line_errors
def rules_show(
    rule_id: Annotated[
        str, typer.Argument(help="A rule id, or an upstream issue URL or owner/repo#N it cites.")
    ],
) -> None:
    """A rule in full: conditions, symptoms, fix and references."""
    from attn_doctor.engine.loader import load_rules
    from attn_doctor.report import width
    from attn_doctor.report.rule_text import describe, no_such_rule

    ruleset = load_rules()
    rule = ruleset.get(rule_id)
    if rule is not None:
        width.write(describe(rule) + "\n")
        return
    from attn_doctor.engine.references import rules_citing

    citing = rules_citing(rule_id, ruleset.rules)
    if not citing:
        raise InputError(rule_id[:200], no_such_rule(rule_id, ruleset.rules))
    width.write("\n\n".join(describe(rule) for rule in citing) + "\n")


@rules_app.command("validate", short_help="Check rule files against the schema.")
@_one_line_errors
def rules_validate(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Rule files or folders (default: the database)."),
    ] = None,
) -> None:
    """Check rule files against the schema; every problem names the file and the field."""
    from attn_doctor.engine.loader import load_rules
    from attn_doctor.words import counted

    ruleset = load_rules(paths or None)
    for problem in ruleset.problems:
        _error(problem)
    if ruleset.problems:
        typer.echo(
            f"{counted(len(ruleset.problems), 'problem')}; {counted(len(ruleset.rules), 'valid rule')}"
        )
        raise typer.Exit(EXIT_INPUT_ERROR)
    typer.echo(f"ok: {counted(len(ruleset.rules), 'rule')} valid")


@db_app.command("info")
@_one_line_errors
def db_info(
    output_format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> None:
    """The snapshot's date, packages and release counts, and the command that made it."""
    from attn_doctor.releases.facts import snapshot
    from attn_doctor.report import db_info as render
    from attn_doctor.report.width import terminal_width

    _require_choice("--format", output_format, ("text", "json"))
    from attn_doctor.releases.messages import catalogue

    facts, messages = snapshot(), catalogue()
    if output_format == "json":
        sys.stdout.write(render.to_json(facts, messages))
    else:
        sys.stdout.write(render.to_text(facts, messages, terminal_width()))


def main() -> None:
    from attn_doctor import streams

    streams.guard()
    try:
        app(prog_name="attn-doctor")
    except SystemExit:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            streams.quiet_broken_pipe()
        raise
