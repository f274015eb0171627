"""A Dockerfile: the image its stage is built ``FROM`` (facts/images.py), with what its ``RUN`` lines
install laid over the image's. The last stage by default (``--stage`` chooses); a ``FROM`` another
stage of the file follows that stage.

What a RUN line is read as, in order (the last statement of a package wins):

- ``pip``/``pip3``/``python -m pip``/``uv pip``/``conda``/``mamba`` ``install`` and ``uninstall``,
  after environment assignments (``MAX_JOBS=8 pip install ...``, ``env X=1 pip ...``); an
  uninstalled package is absent unless a later line installs it again.
- ``--index-url``/``--extra-index-url`` ``.../whl/cu129`` (or ``PIP_INDEX_URL``, uv's
  ``--torch-backend``/``UV_TORCH_BACKEND``): torch, torchvision and torchaudio pinned without a
  local label get the index's (``2.9.1+cu129``).
- A wheel (``flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-...whl``, local or a URL): its
  name and version from the file name (PEP 427). ``-r FILE``: the requirements file, where it is
  next to the Dockerfile (the build context is not known).
- ``ARG``/``ENV`` values: ``torch==${PYTORCH_VERSION}`` takes the ARG's default, and the fact's
  origin says so; a variable with no value here (an ARG without a default, a shell variable)
  leaves the version unknown. ``if``/``elif``/``else`` and ``||``: a condition on known values
  (``[ "$X" = "true" ]``, ``-n``, ``-z``) chooses its branch; otherwise the branches are
  alternatives: a version they agree on, else unknown (one of the versions they install).

A line it cannot read is a problem with its FILE:LINE, never the end of the file: ``pip install -e
.`` (the project itself), a ``-r`` file not beside the Dockerfile, a VCS or archive URL, a local
folder, a wheel named by a pattern. Each of those, and a ``FROM`` image whose contents are not known
(``ghcr.io/org/img:tag``, an NGC tag the release facts lack), leaves the package list open: a
package the Dockerfile does not install is unknown, not absent.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from attn_doctor.errors import InputError
from attn_doctor.facts import images
from attn_doctor.facts.model import OPEN_DOCKERFILE_PACKAGE_LIST, Package
from attn_doctor.facts.names import installed_name
from attn_doctor.facts.sources.common import (
    PLAIN_VERSION,
    Declared,
    applies,
    check_version,
    exact_version,
    shown,
    url_shown,
)
from attn_doctor.facts.sources.conda_names import add_spec
from attn_doctor.releases.facts import snapshot

_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(?P<image>\S+)(?:\s+AS\s+(?P<stage>\S+))?\s*$", re.I)
_INSTRUCTION = re.compile(r"^(?P<keyword>[A-Za-z]+)(?:\s+(?P<rest>.*))?$", re.S)
_RUN_FLAGS = re.compile(r"^(?:--[a-z-]+=\S*\s*)+")  # RUN --mount=type=cache,target=/root/.cache/uv
_VARIABLE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-+])(?P<word>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# a variable with no value here, kept in the word: \ue000NAME\ue001
_OPEN, _CLOSE = "\ue000", "\ue001"
_UNKNOWN = re.compile(f"{_OPEN}([^{_CLOSE}]*){_CLOSE}")
_NAME_BEFORE_SPEC = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?:\[[^\]]*\])?\s*(?:[=<>!~]=?)"
)
_PLAIN_PIN = re.compile(
    rf"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(?P<version>{PLAIN_VERSION})"
)
_PIP = re.compile(r"^pip(?:3(?:\.[0-9]+)?)?$")
_PYTHON = re.compile(r"^python(?:3(?:\.[0-9]+)?)?$")
_CONDA = ("conda", "mamba", "micromamba")
# the index a URL names: .../whl/cu129, .../whl/nightly/cu128, .../whl/cpu
_INDEX_VARIANT = re.compile(r"/whl/(?:nightly/|test/)?(?P<variant>cu[0-9]{2,3}|cpu|rocm[0-9.]+|xpu)/?$")
_VARIANT = re.compile(r"^(?:cu[0-9]{2,3}|cpu|rocm[0-9.]+|xpu)$")
_TORCH_INDEX_PACKAGES = ("torch", "torchvision", "torchaudio")  # what the PyTorch index labels
_INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "--index", "--default-index")
_INDEX_ENVIRONMENT = (
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
)
# pip's and uv's install options that take a value (the next word, unless written --opt=value)
_VALUE_OPTION_WORDS = """
    -c --constraint -t --target --platform --python-version --implementation --abi --root --prefix
    --src --upgrade-strategy -C --config-settings --global-option --build-option --install-option
    --no-binary --only-binary --progress-bar --root-user-action --report -i --index-url
    --extra-index-url -f --find-links --log --proxy --retries --timeout --exists-action
    --trusted-host --cert --client-cert --cache-dir --use-feature --use-deprecated --resume-retries
    --keyring-provider --python -p --index --default-index --index-strategy --torch-backend --extra
    --group --override --prerelease --resolution --link-mode --python-platform --reinstall-package
    --refresh-package --no-build-isolation-package --exclude-newer --config-file --upgrade-package
    -P --build-constraint --build-constraints --no-binary-package --only-binary-package --channel
    -n --name --file --override-channels-url
"""
_VALUE_OPTIONS = frozenset(_VALUE_OPTION_WORDS.split())
_SEPARATORS = frozenset({";", "&&", "|", "&", "|&", ";;"})
_REDIRECTIONS = frozenset({">", ">>", "<", "<<", ">&", "<&", "&>", "&>>", ">|", "<>"})
# BuildKit's automatic platform ARGs, for the target's platform
_MACHINES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def recognises(path: Path, text: str) -> bool:
    name = path.name
    return (
        name in ("Dockerfile", "Containerfile")
        or name.startswith(("Dockerfile.", "Dockerfile-", "Containerfile."))
        or name.endswith((".Dockerfile", ".dockerfile"))
    )


def read(
    path: Path,
    text: str,
    markers: dict[str, str],
    extras: frozenset[str] = frozenset(),
    stage: str | None = None,
) -> Declared:
    stages, global_args = _stages(text, markers)
    if not stages:
        raise InputError(str(path), "no FROM line")
    name = stage if stage is not None else stages[-1].name
    chosen = next((s for s in stages if s.name == name), None)
    if chosen is None:
        raise InputError(
            f"--stage {stage}", f"no such stage in {path} (stages: {', '.join(s.name for s in stages)})"
        )
    declared, _ = _stage_facts(path, chosen, {s.name: s for s in stages}, global_args, markers, depth=0)
    return declared


@dataclass
class _Var:
    value: str | None  # None: no value here (an ARG without a default)
    note: str  # what the origin says when the value is used


@dataclass
class _Stage:
    name: str
    image: str  # as written: variables are expanded with the global ARGs
    line: int
    instructions: list[tuple[int, str, str]] = field(default_factory=list)  # line, keyword, rest


@dataclass(frozen=True)
class _Removed:
    origin: str


_Entry = Package | _Removed


@dataclass
class _State:
    """What the RUN lines so far leave installed, removed, and torch's CUDA (conda's pytorch-cuda,
    an index's variant for an unpinned torch)."""

    packages: dict[str, _Entry] = field(default_factory=dict)
    torch_cuda: tuple[str, str] | None = None

    def copy(self) -> _State:
        return _State(dict(self.packages), self.torch_cuda)


@dataclass
class _Reader:
    path: Path
    markers: dict[str, str]
    variables: dict[str, _Var]
    problems: list[str] = field(default_factory=list)
    unread: bool = False  # an install whose packages are not known: the list is open
    included: dict[str, Declared] = field(default_factory=dict)  # -r files read, by their path

    def problem(self, origin: str, text: str, *, unread: bool = True) -> None:
        self.problems.append(f"{origin}: {text}")
        self.unread = self.unread or unread


# ---- instructions and stages -------------------------------------------------------------------


def _stages(text: str, markers: dict[str, str]) -> tuple[list[_Stage], dict[str, _Var]]:
    """The stages with their instructions, and the ARGs declared before the first FROM."""
    stages: list[_Stage] = []
    global_args: dict[str, _Var] = {}
    for number, line in _instructions(text):
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        keyword, rest = match["keyword"].upper(), (match["rest"] or "").strip()
        if keyword == "FROM" and (found := _FROM.match(line)):
            stages.append(_Stage(found["stage"] or str(len(stages)), found["image"], number))
        elif stages:
            stages[-1].instructions.append((number, keyword, rest))
        elif keyword == "ARG":
            _declare_args(rest, number, global_args, {}, markers)
    return stages, global_args


def _instructions(text: str) -> list[tuple[int, str]]:
    """Instructions with their continuation lines joined, each numbered by its first line; comment
    lines are dropped, inside a continuation too, as Docker does."""
    joined: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append((start, pending + line))
        pending = ""
    if pending:
        joined.append((start, pending))
    return joined


def _stage_facts(
    path: Path,
    stage: _Stage,
    stages: dict[str, _Stage],
    global_args: dict[str, _Var],
    markers: dict[str, str],
    depth: int,
) -> tuple[Declared, dict[str, _Var]]:
    """The stage's installs over its base (another stage, or an image), and its ENV for a stage
    built on it."""
    image, _, unknown = _expand(stage.image, global_args)
    origin = f"{path}:{stage.line}"
    inherited: dict[str, _Var] = {}
    base: Declared | None
    problems: list[str] = []
    if image in stages and depth < len(stages):
        base, inherited = _stage_facts(path, stages[image], stages, global_args, markers, depth + 1)
    elif image == "scratch":
        base = Declared()
    elif unknown:
        problems.append(f"{origin}: FROM {_shown(image)}: {_no_value(unknown)}: the image is not known")
        base = None
    else:
        try:
            base = images.base_image_facts(image, snapshot(), f"{origin}: FROM {image}")
        except InputError as exc:  # an NGC or pytorch/pytorch tag the release facts do not know
            problems.append(f"{exc}: what it ships is unknown")
            base = None
        else:
            if base is None:
                problems.append(
                    f"{origin}: FROM {image}: an image whose contents are not known: what it ships is unknown"
                )
    reader = _Reader(path, markers, dict(inherited))
    state = _State()
    for number, keyword, rest in stage.instructions:
        if keyword == "ARG":
            _declare_args(rest, number, reader.variables, global_args, markers)
        elif keyword == "ENV":
            _declare_env(rest, number, reader.variables)
        elif keyword == "RUN":
            _run(reader, number, _shell_form(rest), state)
    declared = _declared(state)
    if base is None or reader.unread:
        declared.open_package_list = OPEN_DOCKERFILE_PACKAGE_LIST
    if base is not None:
        declared.merge(base)  # torch installed over the image's: the image's CUDA goes with its torch
    declared.problems += [*problems, *reader.problems]  # the base stage's first
    env = {name: var for name, var in reader.variables.items() if var.note.startswith("the ENV")}
    return declared, {**inherited, **env}


def _shell_form(rest: str) -> str:
    """A RUN's command: its ``--mount=...`` flags dropped, an exec form (``["pip", "install", "x"]``)
    joined as the shell would see it."""
    rest = _RUN_FLAGS.sub("", rest) if rest.startswith("--") else rest
    if rest.startswith("["):
        try:
            words = json.loads(rest)
        except ValueError:
            return rest
        if isinstance(words, list) and all(isinstance(word, str) for word in words):
            return shlex.join(words)
    return rest


def _declared(state: _State) -> Declared:
    declared = Declared()
    for name, entry in state.packages.items():
        if isinstance(entry, _Removed):
            declared.absent[name] = entry.origin
        else:
            declared.packages[name] = entry
    if state.torch_cuda and "torch" in declared.packages:
        declared.torch_cuda = state.torch_cuda
    return declared


def _declare_args(
    rest: str, number: int, variables: dict[str, _Var], global_args: dict[str, _Var], markers: dict[str, str]
) -> None:
    """``ARG NAME[=default] ...``: a default is the value; ``ARG NAME`` takes the global ARG's
    default, or BuildKit's platform value (TARGETARCH), else has no value here."""
    for word in _words(rest):
        name, equals, default = word.partition("=")
        if equals:
            value, notes, unknown = _expand(default, variables)
            variables[name] = _Var(
                None if unknown else value, f"{name}={value}, the ARG default of line {number}"
            )
        elif name in global_args:
            variables[name] = global_args[name]
        elif (platform := _platform_arg(name, markers)) is not None:
            variables[name] = _Var(platform, f"{name}={platform}, BuildKit's for the target's platform")
        else:
            variables[name] = _Var(None, f"the ARG {name} of line {number} has no default")


def _platform_arg(name: str, markers: dict[str, str]) -> str | None:
    arch = _MACHINES.get(markers.get("platform_machine", ""))
    os_name = {"linux": "linux", "win32": "windows", "darwin": "darwin"}.get(markers.get("sys_platform", ""))
    values = {
        "TARGETARCH": arch,
        "TARGETOS": os_name,
        "TARGETPLATFORM": f"{os_name}/{arch}" if arch and os_name else None,
    }
    return values.get(name)


def _declare_env(rest: str, number: int, variables: dict[str, _Var]) -> None:
    """``ENV NAME=value ...``, or the old ``ENV NAME value words``."""
    words = _words(rest)
    if words and "=" not in words[0]:
        words = [f"{words[0]}={' '.join(words[1:])}"]
    for word in words:
        name, equals, raw = word.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            continue
        value, _, unknown = _expand(raw, variables)
        variables[name] = _Var(None if unknown else value, f"the ENV {name}={value} of line {number}")


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _expand(text: str, variables: dict[str, _Var]) -> tuple[str, list[str], list[str]]:
    """``text`` with its ``$NAME``/``${NAME}``/``${NAME:-word}`` replaced by their values; the notes
    of those used, and the names with no value here (kept in the text between _OPEN and _CLOSE)."""
    notes: list[str] = []
    unknown: list[str] = []

    def value(match: re.Match[str]) -> str:
        name = match["braced"] or match["bare"]
        var = variables.get(name)
        if var is None or var.value is None:
            unknown.append(name)
            return f"{_OPEN}{name}{_CLOSE}"
        notes.append(var.note)
        op, word = match["op"], match["word"] or ""
        if op in (":-", "-"):
            return word if (op == ":-" and not var.value) else var.value
        if op in (":+", "+"):
            return word if (var.value or op == "+") else ""
        return var.value

    if "$" not in text:
        return text, notes, unknown
    return _VARIABLE.sub(value, text), notes, unknown


def _no_value(names: list[str]) -> str:
    return f"{', '.join(dict.fromkeys(names))} has no value here"


def _shown(text: str) -> str:
    return shown(_UNKNOWN.sub(r"${\1}", text))


# ---- shell ---------------------------------------------------------------------------------------

Word = tuple[str, tuple[str, ...]]  # the word with its variables' values, and their notes


@dataclass
class _Command:
    words: list[Word]


@dataclass
class _Branches:
    """``if``/``elif``/``else`` (or ``a || b``): one of the bodies runs. ``conditions`` are the
    commands that choose (None for an ``else`` or the right of ``||``)."""

    conditions: list[list[_Command] | None]
    bodies: list[list[_Node]]
    chain: int = 0  # how many ``||`` are nested in it


_Node = _Command | _Branches
_MAX_NESTING = 24  # ifs, groups and || chains deeper than this are read as plain words (bounded time)


def _run(reader: _Reader, number: int, command: str, state: _State) -> None:
    origin = f"{reader.path}:{number}"
    try:
        tokens = _tokens(command[:20_000])
    except ValueError:
        reader.problem(
            origin,
            f"{shown(command.strip())}: not a shell command this reader reads",
            unread=_installs_anything(command),
        )
        return
    nodes, _ = _parse(tokens, 0, frozenset(), 0)
    _evaluate(reader, origin, nodes, state, ())


# a shell word (quotes and backslashes kept, removed by _unquoted) or an operator
_TOKEN = re.compile(
    r"""\s*(?:(?P<op>&&|\|\||;;|>>|<<|>&|<&|&>|[;&|()<>])|(?P<word>(?:[^\s;&|()<>'"\\]+|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+))""",
    re.S,
)
_QUOTED = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)""", re.S)
_ESCAPED_IN_DOUBLE_QUOTES = re.compile(r"""\\([$`"\\\n])""")


def _tokens(command: str) -> list[str]:
    """The words and operators of a shell command line, as the shell splits it (quotes removed);
    ValueError for an unclosed quote."""
    tokens: list[str] = []
    position, end = 0, len(command.rstrip())
    while position < end:
        match = _TOKEN.match(command, position)
        if match is None or match.end() == position:
            raise ValueError(f"no closing quotation at {position}")
        position = match.end()
        word = match["word"]
        tokens.append(
            match["op"]
            if word is None
            else _unquoted(word)
            if "'" in word or '"' in word or "\\" in word
            else word
        )
    return tokens


def _unquoted(word: str) -> str:
    def piece(match: re.Match[str]) -> str:
        single, double, escaped = match.groups()
        if single is not None:
            return single
        if double is not None:
            return _ESCAPED_IN_DOUBLE_QUOTES.sub(r"\1", double)
        return escaped

    return _QUOTED.sub(piece, word)


def _installs_anything(command: str) -> bool:
    return bool(re.search(r"\b(?:pip3?|conda|mamba)\b", command))


def _parse(tokens: list[str], i: int, stops: frozenset[str], depth: int) -> tuple[list[_Node], int]:
    """Commands up to one of ``stops`` (as a command's first word): a sequence of nodes."""
    nodes: list[_Node] = []
    while i < len(tokens):
        token, start = tokens[i], i
        if token in stops:
            return nodes, i
        if token in _SEPARATORS:
            i += 1
        elif token == "||":
            right, i = _parse_one(tokens, i + 1, stops, depth)
            last = nodes[-1] if nodes else None
            chain = last.chain if isinstance(last, _Branches) else 0
            if last is not None and right is not None and chain < _MAX_NESTING:
                nodes[-1] = _Branches([None, None], [[last], [right]], chain + 1)
            elif right is not None:
                nodes.append(right)
        else:
            node, i = _parse_one(tokens, i, stops, depth)
            if node is not None:
                nodes.append(node)
        if i == start:  # a ")" or "}" that closes nothing
            i += 1
    return nodes, i


def _parse_one(tokens: list[str], i: int, stops: frozenset[str], depth: int) -> tuple[_Node | None, int]:
    if i >= len(tokens):
        return None, i
    token = tokens[i]
    nested = depth < _MAX_NESTING
    if token == "if" and nested:
        return _parse_if(tokens, i + 1, depth + 1)
    if token in ("for", "while", "until") and nested:  # the body may run or not: one branch of two
        _, i = _parse(tokens, i + 1, frozenset({"do"}), depth + 1)
        body, i = _parse(tokens, i + 1, frozenset({"done"}), depth + 1)
        return _Branches([None, None], [body, []]), i + 1
    if token == "case":
        while i < len(tokens) and tokens[i] != "esac":
            i += 1
        return None, i + 1
    if token in ("(", "{") and nested:
        body, i = _parse(tokens, i + 1, frozenset({")", "}"}), depth + 1)
        return _Branches([None], [body]), i + 1
    words: list[Word] = []
    while (
        i < len(tokens)
        and tokens[i] not in _SEPARATORS
        and tokens[i] not in ("||", ")", "}")
        and not (not words and tokens[i] in stops)
    ):
        if tokens[i] == "(" and nested:  # $(...): a command substitution, not an install
            _, i = _parse(tokens, i + 1, frozenset({")"}), depth + 1)
        elif tokens[i] in _REDIRECTIONS:
            if words and words[-1][0].isdigit():  # 2>&1: the 2 is the redirection's
                words.pop()
            i += 1  # and its target
        else:
            words.append((tokens[i], ()))
        i += 1
    return (_Command(words) if words else None), i


def _parse_if(tokens: list[str], i: int, depth: int) -> tuple[_Node, int]:
    conditions: list[list[_Command] | None] = []
    bodies: list[list[_Node]] = []
    keyword = "if"
    while keyword in ("if", "elif"):
        condition, i = _parse(tokens, i, frozenset({"then"}), depth)
        body, i = _parse(tokens, i + 1, frozenset({"elif", "else", "fi"}), depth)
        conditions.append([node for node in condition if isinstance(node, _Command)])
        bodies.append(body)
        keyword = tokens[i] if i < len(tokens) else "fi"
        i += 1
    if keyword == "else":
        body, i = _parse(tokens, i, frozenset({"fi"}), depth)
        i += 1
    else:
        body = []
    conditions.append(None)
    bodies.append(body)
    return _Branches(conditions, bodies), i


def _evaluate(
    reader: _Reader, origin: str, nodes: list[_Node], state: _State, notes: tuple[str, ...]
) -> None:
    for node in nodes:
        if isinstance(node, _Command):
            _command(reader, origin, _expanded(node.words, reader.variables), state, notes)
            continue
        if len(node.bodies) == 1:  # ( ... ) or { ...; }
            _evaluate(reader, origin, node.bodies[0], state, notes)
            continue
        chosen = _chosen_branch(reader, node)
        if chosen is not None:
            index, condition_notes = chosen
            _evaluate(reader, origin, node.bodies[index], state, (*notes, *condition_notes))
            continue
        outcomes = []
        for body in node.bodies:
            branch = state.copy()
            _evaluate(reader, origin, body, branch, notes)
            outcomes.append(branch)
        _join(state, outcomes, origin)


def _expanded(words: list[Word], variables: dict[str, _Var]) -> list[Word]:
    """Each word with its variables' values; a value with spaces is split, as the shell splits an
    unquoted one."""
    out: list[Word] = []
    for text, _ in words:
        value, notes, _ = _expand(text, variables)
        if notes and value != text and " " in value.strip():
            out += [(part, tuple(notes)) for part in value.split()]
        else:
            out.append((value, tuple(notes)))
    return out


def _chosen_branch(reader: _Reader, node: _Branches) -> tuple[int, tuple[str, ...]] | None:
    """The branch an ``if`` takes where each condition up to it is a test of known values."""
    notes: list[str] = []
    for index, condition in enumerate(node.conditions):
        if condition is None:
            return (
                (index, tuple(notes)) if len(node.conditions) > 1 and node.conditions[0] is not None else None
            )
        outcome = _test(_expanded(condition[0].words, reader.variables) if len(condition) == 1 else [])
        if outcome is None:
            return None
        held, used = outcome
        notes += used
        if held:
            return index, tuple(notes)
    return None


def _test(words: list[Word]) -> tuple[bool, list[str]] | None:
    """``[ A = B ]``, ``[ A != B ]``, ``[ -n A ]``, ``[ -z A ]`` (and ``[[ ]]``, ``test``) of values
    known here; None for anything else."""
    texts = [text for text, _ in words]
    notes = [note for _, word_notes in words for note in word_notes]
    if texts[:1] == ["test"]:
        texts = texts[1:]
    elif texts[:1] in (["["], ["[["]) and texts[-1:] in (["]"], ["]]"]):
        texts = texts[1:-1]
    else:
        return None
    if any(_OPEN in text for text in texts):
        return None
    if len(texts) == 3 and texts[1] in ("=", "==", "!="):
        return (texts[0] == texts[2]) == (texts[1] != "!="), notes
    if len(texts) == 2 and texts[0] in ("-n", "-z"):
        return bool(texts[1]) == (texts[0] == "-n"), notes
    if len(texts) == 1 and texts[0] in ("-n", "-z"):  # [ -n "" ]: the operand was empty
        return texts[0] == "-z", notes
    return None


def _join(state: _State, outcomes: list[_State], origin: str) -> None:
    """After branches of which one ran: what they agree on, else alternatives."""
    names = {
        name
        for outcome in outcomes
        for name in outcome.packages
        if outcome.packages[name] != state.packages.get(name)
    }
    for name in sorted(names):
        entries = [outcome.packages.get(name) for outcome in outcomes]
        first = entries[0]
        if all(_same(entry, first) for entry in entries):
            if first is None:
                state.packages.pop(name, None)
            else:
                state.packages[name] = first
            continue
        versions = [e.version for e in entries if isinstance(e, Package)]
        installed = next(e for e in entries if isinstance(e, Package)) if versions else None
        if installed is None:  # removed in some branches, left as it was in others
            state.packages.pop(name, None)
            continue
        if all(isinstance(e, Package) and e.version is not None for e in entries):
            releases = tuple(sorted({v for v in versions if v}, key=_sort_key))
            note = f"one of {', '.join(releases)}: the branches of a shell if or || install each"
            state.packages[name] = Package(
                installed.name, None, installed.distribution, f"{origin} ({note})", releases
            )
        else:
            note = "installed by some branches of a shell if or ||, not by others, or without a version"
            state.packages[name] = Package(installed.name, None, installed.distribution, f"{origin} ({note})")
    cudas = {outcome.torch_cuda for outcome in outcomes}
    state.torch_cuda = cudas.pop() if len(cudas) == 1 else None


def _same(a: _Entry | None, b: _Entry | None) -> bool:
    if isinstance(a, Package) and isinstance(b, Package):
        return a.version == b.version and a.releases == b.releases
    return type(a) is type(b)


def _sort_key(version: str) -> tuple[int, Version | str]:
    try:
        return 0, Version(version)
    except InvalidVersion:
        return 1, version


# ---- one command ---------------------------------------------------------------------------------


def _command(reader: _Reader, origin: str, words: list[Word], state: _State, notes: tuple[str, ...]) -> None:
    environment: dict[str, Word] = {}
    i = 0
    while i < len(words):  # MAX_JOBS=8 pip ..., env X=1 pip ..., sudo pip ...
        text = words[i][0]
        if _ASSIGNMENT.match(text):
            name, _, value = text.partition("=")
            environment[name] = (value, words[i][1])
        elif text in ("env", "sudo", "exec", "time", "nohup", "command") or (text.startswith("-") and i > 0):
            pass
        else:
            break
        i += 1
    words = words[i:]
    if not words:
        return
    program = words[0][0].rsplit("/", 1)[-1]
    rest = [w for w in words[1:]]
    if _PYTHON.match(program):
        while rest and rest[0][0].startswith("-") and rest[0][0] != "-m":
            rest = rest[1:]
        if len(rest) >= 2 and rest[0][0] == "-m":
            program, rest = rest[1][0], rest[2:]
        else:
            return
    if program == "uv" and rest[:1] and rest[0][0] == "pip":
        program, rest = "pip", rest[1:]
    if not rest:
        return
    action = rest[0][0]
    if _PIP.match(program) and action == "install":
        _pip_install(reader, origin, rest[1:], environment, state, notes)
    elif _PIP.match(program) and action == "uninstall":
        _pip_uninstall(reader, origin, rest[1:], state)
    elif program in _CONDA and action == "install":
        _conda_install(reader, origin, rest[1:], state)
    elif program in _CONDA and action in ("remove", "uninstall"):
        _pip_uninstall(reader, origin, rest[1:], state)


def _options(words: list[Word]) -> tuple[list[tuple[str, str, tuple[str, ...]]], list[Word]]:
    """pip's options, each (option, value, notes), and its other arguments."""
    options: list[tuple[str, str, tuple[str, ...]]] = []
    arguments: list[Word] = []
    i = 0
    while i < len(words):
        text, notes = words[i]
        if text.startswith("--") and "=" in text:
            option, _, value = text.partition("=")
            options.append((option, value, notes))
        elif text in ("-r", "--requirement", "-e", "--editable") or text in _VALUE_OPTIONS:
            value, value_notes = words[i + 1] if i + 1 < len(words) else ("", ())
            options.append((text, value, (*notes, *value_notes)))
            i += 1
        elif re.fullmatch(r"-[rceif].+", text) and not text.startswith("--"):  # -rreq.txt, -e.
            options.append((text[:2], text[2:], notes))
        elif text.startswith("-"):
            options.append((text, "", notes))
        elif text:  # an empty value ($AXOLOTL_ARGS, its ARG default "") is no argument
            arguments.append((text, notes))
        i += 1
    return options, arguments


def _pip_install(
    reader: _Reader,
    origin: str,
    words: list[Word],
    environment: dict[str, Word],
    state: _State,
    notes: tuple[str, ...],
) -> None:
    options, arguments = _options(words)
    variant = _variant(options, environment, reader.variables)
    for option, value, _ in options:
        if option in ("-r", "--requirement"):
            _requirements_file(reader, origin, value, state)
        elif option in ("-e", "--editable"):
            _editable(reader, origin, value, state)
    before = dict(state.packages)
    for text, word_notes in arguments:
        _argument(reader, origin, text, (*notes, *word_notes), state, variant)
    if variant is not None and variant[0].startswith("cu"):  # an unpinned torch from a CUDA index
        torch = state.packages.get("torch")
        if isinstance(torch, Package) and torch is not before.get("torch") and torch.version is None:
            cuda = f"{variant[0][2:-1]}.{variant[0][-1]}"
            state.torch_cuda = (cuda, f"{origin} ({variant[1]})")


def _variant(
    options: list[tuple[str, str, tuple[str, ...]]], environment: dict[str, Word], variables: dict[str, _Var]
) -> tuple[str, str] | None:
    """The PyTorch index's variant (cu129) this install reads from, and where that is said."""
    found: tuple[str, str] | None = None
    for name in (*_INDEX_ENVIRONMENT, "UV_TORCH_BACKEND"):
        if name in environment:
            value, notes = environment[name]
            found = _variant_of(f"{name}=", value, notes) or found
        elif (var := variables.get(name)) is not None and var.value:
            found = _variant_of(f"{name}=", var.value, (var.note,)) or found
    for option, value, notes in options:
        if option in _INDEX_OPTIONS or option == "--torch-backend":
            found = _variant_of(f"{option} ", value, notes) or found
    return found


def _variant_of(option: str, value: str, notes: tuple[str, ...]) -> tuple[str, str] | None:
    said = f" ({'; '.join(notes)})" if notes else ""
    if "TORCH_BACKEND" in option or option.startswith("--torch-backend"):
        return (value, f"+{value} from {option}{value}{said}") if _VARIANT.match(value) else None
    for url in value.split():
        if match := _INDEX_VARIANT.search(url):
            return match["variant"], f"+{match['variant']} from {option}{url}{said}"
    return None


def _argument(
    reader: _Reader,
    origin: str,
    text: str,
    notes: tuple[str, ...],
    state: _State,
    variant: tuple[str, str] | None,
) -> None:
    where = f"{origin} ({'; '.join(dict.fromkeys(notes))})" if notes else origin
    if _OPEN in text:
        unknown = _UNKNOWN.findall(text)
        match = _NAME_BEFORE_SPEC.match(text)
        if match and _OPEN not in match["name"]:
            note = f"{_shown(text)}: {_no_value(unknown)}: version unknown"
            _install(reader, state, match["name"], None, f"{origin} ({note})")
        else:
            reader.problem(origin, f"{_shown(text)}: {_no_value(unknown)}: not read")
        return
    if pin := _PLAIN_PIN.fullmatch(text):  # NAME==VERSION, most lines: without packaging's parser
        version = pin["version"]
        if variant and "+" not in version and pin["name"].lower() in _TORCH_INDEX_PACKAGES:
            version, notes = f"{version}+{variant[0]}", (*notes, variant[1])
        _install(
            reader,
            state,
            pin["name"],
            version,
            f"{origin} ({'; '.join(dict.fromkeys(notes))})" if notes else origin,
        )
    elif _is_wheel(text):
        _wheel(reader, origin, text, state)
    elif text == "." or text.startswith(".["):
        reader.problem(origin, f"pip install {_shown(text)}: the project itself, not read")
    elif text.startswith((".", "/", "~")) or text.endswith((".tar.gz", ".zip", ".tgz")) and "://" not in text:
        reader.problem(origin, f"{shown(text)}: a local folder or archive, not read")
    elif re.match(r"^[a-z][a-z0-9+.-]*://", text):
        egg = re.search(r"#egg=([A-Za-z0-9._-]+)", text)
        if egg:
            _install(reader, state, egg[1], None, f"{origin} ({url_shown(text)})")
        else:
            reader.problem(
                origin, f"{shown(text)}: a URL that names no package (a VCS or archive install), not read"
            )
    else:
        try:
            req = Requirement(text)
        except (InvalidRequirement, ValueError) as exc:
            reader.problem(
                origin, f"{shown(text)}: not a requirement: {shown(str(exc).splitlines()[0])}", unread=False
            )
            return
        try:
            if req.marker and not applies(str(req.marker), reader.markers, origin):
                return
        except InputError as exc:
            reader.problem(origin, str(exc).partition(": ")[2] or str(exc), unread=False)
            return
        if req.url:
            if _is_wheel(req.url):
                _wheel(reader, origin, req.url, state, req.name)
            else:
                _install(reader, state, req.name, None, f"{origin} ({url_shown(req.url)})")
            return
        version = exact_version(req)
        if version and variant and "+" not in version and req.name.lower() in _TORCH_INDEX_PACKAGES:
            version = f"{version}+{variant[0]}"
            notes = (*notes, variant[1])
            where = f"{origin} ({'; '.join(dict.fromkeys(notes))})"
        _install(reader, state, req.name, version, where, specifier=str(req.specifier))


def _is_wheel(text: str) -> bool:
    return urlsplit(text).path.endswith(".whl") if "://" in text else text.endswith(".whl")


def _wheel(reader: _Reader, origin: str, text: str, state: _State, name: str | None = None) -> None:
    """A wheel's name and version from its file name (PEP 427); a URL's path is unquoted (%2B)."""
    filename = unquote(urlsplit(text).path if "://" in text else text).rsplit("/", 1)[-1]
    if "*" in filename or "?" in filename:
        reader.problem(origin, f"{shown(text)}: wheels named by a pattern, not read")
        return
    try:
        wheel_name, version, _, _ = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion, ValueError):
        reader.problem(origin, f"{shown(text)}: not a wheel's file name (NAME-VERSION-TAGS.whl), not read")
        return
    _install(
        reader,
        state,
        name or filename.split("-", 1)[0],
        str(version),
        f"{origin} ({url_shown(text)})",
        wheel=filename,
    )


def _install(
    reader: _Reader,
    state: _State,
    name: str,
    version: str | None,
    origin: str,
    *,
    specifier: str | None = None,
    wheel: str | None = None,
) -> None:
    """``name`` installed (over what was before); ``specifier``: the range a requirement without an
    exact version gave ("" unpinned); ``wheel``: the wheel file it is installed from."""
    try:
        if version is not None:
            check_version(version, origin)
    except InputError as exc:
        reader.problem(origin.split(" (", 1)[0], str(exc).rpartition(": ")[2], unread=False)
        version = None
    package = Package(
        installed_name(name, version),
        version,
        name,
        origin,
        specifier=specifier if version is None else None,
        wheel=wheel,
    )
    state.packages.pop(package.name, None)  # the later install wins, and keeps its place last
    state.packages[package.name] = package
    if package.name == "torch":
        state.torch_cuda = None  # a CUDA stated for an earlier torch is not this one's


def _pip_uninstall(reader: _Reader, origin: str, words: list[Word], state: _State) -> None:
    options, arguments = _options(words)
    if any(option in ("-r", "--requirement") for option, _, _ in options):
        reader.problem(origin, "pip uninstall -r: the file's packages are not read", unread=False)
    for text, _ in arguments:
        name = re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*", text)
        if name and _OPEN not in text:
            canonical = installed_name(name[0], None)
            state.packages[canonical] = _Removed(origin)


def _conda_install(reader: _Reader, origin: str, words: list[Word], state: _State) -> None:
    _, arguments = _options(words)
    declared = Declared()
    for text, _ in arguments:
        try:
            add_spec(text, origin, declared)
        except InputError as exc:
            reader.problem(origin, str(exc).partition(": ")[2] or str(exc), unread=False)
    for name, package in declared.packages.items():
        state.packages.pop(name, None)
        state.packages[name] = package
        if name == "torch":
            state.torch_cuda = None
    if declared.torch_cuda:
        state.torch_cuda = declared.torch_cuda


def _requirements_file(reader: _Reader, origin: str, value: str, state: _State) -> None:
    """``pip install -r FILE``: read where FILE is beside the Dockerfile (a path in the build context
    as the Dockerfile's folder holds it); else a problem."""
    from attn_doctor.facts.sources import requirements
    from attn_doctor.inputs import read_text

    if not value:
        reader.problem(origin, "pip install -r: names no file")
        return
    if _OPEN in value:
        reader.problem(
            origin, f"pip install -r {_shown(value)}: {_no_value(_UNKNOWN.findall(value))}: not read"
        )
        return
    beside = reader.path.parent / value
    try:
        found = not value.startswith("/") and beside.is_file()
    except (OSError, ValueError):  # a name too long for the file system
        found = False
    if not found:
        reader.problem(
            origin,
            f"pip install -r {shown(value)}: not a file beside the Dockerfile (the build context is not"
            " known): not read; give it with -r",
        )
        return
    if value in reader.included:  # the same file installed again: read once
        declared = reader.included[value]
        for package in declared.packages.values():
            state.packages.pop(package.name, None)
            state.packages[package.name] = package
        return
    declared = reader.included[value] = Declared()
    try:
        requirements.read_lines(
            beside,
            requirements.logical_lines(read_text(beside, f"{origin} ({value})")),
            reader.markers,
            declared,
        )
    except InputError as exc:
        reader.problem(origin, f"pip install -r {shown(value)}: {exc}")
        return
    reader.problems += declared.problems
    for package in declared.packages.values():
        state.packages.pop(package.name, None)
        state.packages[package.name] = package
        if package.name == "torch":
            state.torch_cuda = None


def _editable(reader: _Reader, origin: str, value: str, state: _State) -> None:
    egg = re.search(r"#egg=([A-Za-z0-9._-]+)", value)
    if egg:
        _install(reader, state, egg[1], None, f"{origin} ({url_shown(value)})")
    elif value == "." or value.startswith(".["):
        reader.problem(origin, f"pip install -e {_shown(value)}: the project itself, not read")
    else:
        reader.problem(origin, f"pip install -e {_shown(value)}: a local or VCS project, not read")
