# ruff: noqa: E501  (the sources quoted are as long as the releases write them)
"""The message catalogue (issue 24), offline: the extractor and the merge on sources the tests
write, the reader's one-pass matching, explain's origins, and rules that name messages by id.

The sources below are written for the tests in the shape the releases use (a message built in a
variable, f-strings, %-formatting, a logger call); the shipped catalogue itself is checked
against real release text in test_message_catalogue_snapshot.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attn_doctor.explain as explain_module
from attn_doctor.cli import app
from attn_doctor.releases.messages import Catalogue, entries, layout, read, write
from tools.messages.build import merge, pattern_of, runs
from tools.messages.python_source import extract

OLD = """
class PreTrainedModel:
    def _check_and_enable_flash_attn_2(cls, config):
        preface = "FlashAttention2 has been toggled on, but it cannot be used due to the following error:"
        if not is_flash_attn_2_available():
            if importlib.util.find_spec("flash_attn") is None:
                raise ImportError(f"{preface} the package flash_attn seems to be not installed. {install_message}")
            logger.warning("Flash Attention %s is installed but older than %s", version, "2.1.0")
"""
NEW = """
class PreTrainedModel:
    def _flash_attn_import_error(self, flash_attn_version, pkg_availability_check):
        if not general_availability_check():
            preface = f"FlashAttention{flash_attn_version} has been toggled on, but it cannot be used due to the following error:"
            if not pkg_availability_check():
                raise ImportError(
                    f"{preface} the package for FlashAttention{flash_attn_version} doesn't seem to be installed."
                )
"""


def test_a_message_built_in_steps_is_one_template_with_its_guard():
    (raised, warned) = extract(OLD, "transformers/modeling_utils.py")
    assert raised.kind == "ImportError"
    assert raised.function == "PreTrainedModel._check_and_enable_flash_attn_2"
    assert raised.template == (
        "FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
        "the package flash_attn seems to be not installed. {}"
    )
    assert (
        raised.guard == "not is_flash_attn_2_available() and importlib.util.find_spec('flash_attn') is None"
    )
    assert (
        warned.kind == "log.warning"
        and warned.template == "Flash Attention {} is installed but older than {}"
    )
    (new,) = extract(NEW, "transformers/modeling_utils.py")
    assert new.template.startswith("FlashAttention{} has been toggled on")


def test_patterns_match_the_printed_message_and_nothing_shorter():
    pattern, literal = pattern_of("FlashAttention{} has been toggled on, but it cannot be used: {}")
    assert literal == "has been toggled on, but it cannot be used:"
    import re2

    assert re2.search(pattern, "ImportError: FlashAttention3 has been toggled on, but it cannot be used: x")
    assert not re2.search(pattern, "FlashAttention3 has been toggled off")
    assert pattern_of("{}: {}") is None and pattern_of("bad value {}") is None  # too little text


def test_releases_are_runs():
    versions = ["4.44.0", "4.45.0", "4.46.0", "5.0.0", "5.1.0"]
    assert runs([True, True, False, True, True], versions) == [["4.44.0", "4.45.0"], ["5.0.0", "5.1.0"]]
    assert runs([False, False, False, False, True], versions) == [["5.1.0", "5.1.0"]]


def merged_entries() -> list[dict]:
    old = extract(OLD, "transformers/modeling_utils.py")
    new = extract(NEW, "transformers/modeling_utils.py")
    versions, entries = merge(
        "transformers", [("4.45.0", old), ("4.57.1", old), ("5.0.0", new), ("5.17.0", new)]
    )
    assert versions == ["4.45.0", "4.57.1", "5.0.0", "5.17.0"]
    return entries


def catalogue_of(tmp_path: Path) -> Catalogue:
    data = {"generated": "2026-11-25", "packages": {}, "messages": merged_entries()}
    path = tmp_path / "messages.zip"
    write(data, path)
    return read(path)


def test_the_file_holds_every_entry_and_the_same_data_gives_the_same_bytes(tmp_path: Path):
    catalogue = catalogue_of(tmp_path)
    again = tmp_path / "again.zip"
    write({"generated": "2026-11-25", "packages": {}, "messages": entries(catalogue)}, again)
    assert again.read_bytes() == (tmp_path / "messages.zip").read_bytes()

    def key(entry: dict) -> str:
        return json.dumps(entry, sort_keys=True)

    assert sorted(map(key, entries(catalogue))) == sorted(map(key, merged_entries()))


def test_a_line_reads_only_the_group_it_matches(tmp_path: Path):
    """The reason for the layout: explain on a short log decodes a small part of 12 MB."""
    filler = [
        {
            "id": f"pkg:m.f{n}",
            "package": "pkg",
            "file": "m.py",
            "function": f"f{n}",
            "kind": "ValueError",
            "template": f"message number {n:05d} went wrong",
            "pattern": f"message number {n:05d} went wrong",
            "literal": f"message number {n:05d} went wrong",
            "releases": [["1.0", "1.0"]],
            "guard": "",
        }
        for n in range(1000)
    ]
    parts = layout({"generated": "x", "packages": {}, "messages": filler})
    read_names: list[str] = []
    catalogue = Catalogue(lambda name: read_names.append(name) or parts.get(name, b""))
    (found,) = catalogue.origins("ValueError: message number 00733 went wrong")
    assert found.id == "pkg:m.f733"
    assert [n for n in read_names if n.startswith("groups/")] == ["groups/0005.json"]
    assert len([n for n in parts if n.startswith("groups/")]) == 8


FA2_5X = (
    "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
    "the package for FlashAttention2 doesn't seem to be installed.\n"
)
FA2_4X = (
    "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
    "the package flash_attn seems to be not installed. Please refer to the documentation.\n"
)


def test_a_line_is_traced_to_its_function_and_releases(tmp_path: Path):
    catalogue = catalogue_of(tmp_path)
    (origin,) = catalogue.origins(FA2_5X.strip())
    assert origin.id == "transformers:transformers.modeling_utils.PreTrainedModel._flash_attn_import_error"
    assert origin.release_text() == "5.0.0–5.17.0"
    assert origin.guard == "not general_availability_check() and not pkg_availability_check()"
    assert catalogue.origins(FA2_4X.strip())[0].release_text() == "4.45.0–4.57.1"
    assert catalogue.origins("RuntimeError: something else entirely happened here") == []


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalogue:
    catalogue = catalogue_of(tmp_path)
    monkeypatch.setattr(explain_module, "catalogue", lambda: catalogue)
    return catalogue


def explain_text(tmp_path: Path, log_text: str, *args: str) -> str:
    log = tmp_path / "error.log"
    log.write_text('Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n' + log_text)
    result = CliRunner().invoke(app, ["explain", str(log), "--no-scan", *args], catch_exceptions=False)
    return result.stdout


def test_explain_names_the_origin_of_a_message_no_rule_quotes(tmp_path: Path, shipped: Catalogue):
    text = explain_text(tmp_path, FA2_5X)
    assert "Where its messages come from, in the releases' own code:" in text
    assert (
        "ImportError raised by transformers (modeling_utils.py, PreTrainedModel._flash_attn_import_error) "
        "in 5.0.0–5.17.0, when not general_availability_check() and not pkg_availability_check()"
    ) in " ".join(text.split())


def test_a_rule_naming_the_message_matches_every_release_wording(tmp_path: Path, shipped: Catalogue):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "test-fa-missing.toml").write_text(
        'id = "test-fa-missing"\ntitle = "FA requested, not installed"\nseverity = "error"\n'
        'component = "transformers"\nkind = "usage"\nsummary = "x"\n'
        'references = ["https://github.com/huggingface/transformers/pull/1"]\n'
        'messages = ["transformers:transformers.modeling_utils.PreTrainedModel._flash_attn_import_error",'
        ' "transformers:transformers.modeling_utils.PreTrainedModel._check_and_enable_flash_attn_2"]\n'
        '[affects]\n[fix]\nsummary = "Install flash-attn."\npins = []\n'
    )
    for wording in (FA2_5X, FA2_4X):
        assert "1. ? test-fa-missing" in explain_text(tmp_path, wording, "--rules", str(rules)) or (
            "1. ✗ test-fa-missing" in explain_text(tmp_path, wording, "--rules", str(rules))
        )


def test_a_bad_message_id_is_a_rule_problem(tmp_path: Path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "bad.toml").write_text(
        'id = "bad"\ntitle = "t"\nseverity = "error"\ncomponent = "transformers"\nsummary = "x"\n'
        'references = ["https://github.com/huggingface/transformers/pull/1"]\nmessages = ["no id here"]\n'
        '[affects]\n[fix]\nsummary = "y"\npins = []\n'
    )
    result = CliRunner().invoke(app, ["rules", "validate", str(rules)])
    assert result.exit_code == 2 and "messages[0]" in result.stderr


def test_verbose_names_the_id_a_rule_can_cite(tmp_path: Path, shipped: Catalogue):
    text = explain_text(tmp_path, FA2_5X, "-v")
    assert "id: transformers:transformers.modeling_utils.PreTrainedModel._flash_attn_import_error" in text


# --- a name bound to text, then rebound (tools/messages/python_source.py) ----------------------

# xformers 0.0.30, xformers/ops/fmha/flash.py (0.0.25-0.0.35 alike): "0.0.0" is only the
# placeholder; the check raises with the installed flash_attn.__version__ (xformers#1267)
XFORMERS_FLASH = """
FLASH_VERSION = "0.0.0"
VARLEN_LSE_PACKED = False

if importlib.util.find_spec("..._C_flashattention", package=__package__):
    from ... import _C_flashattention  # type: ignore[attr-defined]
    from ..._cpp_lib import _build_metadata

    if _build_metadata is not None:
        FLASH_VERSION = _build_metadata.flash_version.lstrip("v")
    VARLEN_LSE_PACKED = True

elif importlib.util.find_spec("flash_attn"):
    import flash_attn
    import flash_attn.flash_attn_interface

    FLASH_VERSION = flash_attn.__version__
    FLASH_VER_MIN = (2, 7, 1)
    FLASH_VER_LAST = (2, 7, 4)  # last supported, inclusive
    flash_ver_parsed = tuple(int(s) for s in FLASH_VERSION.split(".")[:3])
    if (
        flash_ver_parsed < FLASH_VER_MIN or flash_ver_parsed > FLASH_VER_LAST
    ) and os.environ.get("XFORMERS_IGNORE_FLASH_VERSION_CHECK", "0") != "1":
        raise ImportError(
            f"Requires Flash-Attention version >={'.'.join([str(i) for i in FLASH_VER_MIN])},"
            f"<={'.'.join([str(i) for i in FLASH_VER_LAST])} "
            f"but got {FLASH_VERSION}."
        )

def _check():
    if FLASH_VERSION == "0.0.0":
        raise NotImplementedError(f"flash-attn {FLASH_VERSION} is not available")
"""


def templates(source: str) -> list[str]:
    return [m.template for m in extract(source, "pkg/module.py")]


def test_a_placeholder_rebound_to_a_value_is_a_field():
    assert templates(XFORMERS_FLASH) == [
        "Requires Flash-Attention version >={},<={} but got {}.",
        "flash-attn {} is not available",  # a function sees the module's rebound name as a field
    ]
    import re2

    (message,) = extract(XFORMERS_FLASH, "xformers/ops/fmha/flash.py")[:1]
    pattern, _ = pattern_of(message.template)
    line = "ImportError: Requires Flash-Attention version >=2.7.1,<=2.7.4 but got 2.8.0.post2."
    assert re2.search(pattern, line)


def test_text_rebound_in_a_branch_is_each_text_or_a_field():
    # kernels 0.17 (kernels/archs.py): reason is set per backend (or stays None); fla 0.6
    # (causal_conv1d/cp.py, layers/*.py): a parameter rebound in a branch; triton 3.9
    # (code_generator.py): one message per branch, as CPython words it
    source = """
def _check_arch_incompatibility(metadata, variant, backend_type):
    reason = None
    if backend_type == Backend.CUDA:
        reason = f"CUDA capability {major}.{minor} of the current device is not supported"
    elif backend_type == Backend.ROCm:
        reason = f"ROCm arch {gcn_arch} of the current device is not supported"
    raise RuntimeError(f"Kernel '{metadata.name}' variant '{variant}' does not support the current device: {reason}.")

def causal_conv1d_cp(x, backend='triton'):
    if backend == 'mix':
        backend = 'triton'
    if backend not in ('triton', 'cuda'):
        raise ValueError(f"Unsupported CP convolution backend: {backend!r}; expected 'triton', 'cuda', or 'mix'")

def forward(self, mode):
    preface = "Attention mode"
    if self.training:
        mode = 'chunk'
    elif q_len <= 64:
        mode = 'fused_recurrent'
        raise NotImplementedError(f"{preface}: not supported mode `{mode}` in inference.")
    raise NotImplementedError(f"{preface}: not supported mode `{mode}`.")

def _sanitize_target_value(num_targets, num_values):
    if num_values > num_targets:
        message = f"too many values to unpack (expected {num_targets})"
    else:
        message = f"not enough values to unpack (expected {num_targets}, got {num_values})"
    raise ValueError(message)
"""
    assert templates(source) == [
        "Kernel '{}' variant '{}' does not support the current device: {}.",
        "Unsupported CP convolution backend: {}; expected 'triton', 'cuda', or 'mix'",
        "Attention mode: not supported mode `fused_recurrent` in inference.",  # bound just before
        "Attention mode: not supported mode `{}`.",  # 'chunk', or the parameter as it came
        "too many values to unpack (expected {})",
        "not enough values to unpack (expected {}, got {})",
    ]


def test_loop_with_except_and_import_targets_are_fields():
    source = """
def load(names, path):
    name = "default"
    for name in names:
        pass
    raise ValueError(f"Could not find the attention backend {name} anywhere")

def build():
    err = "unknown error"
    try:
        import flash_attn
    except ImportError as err:
        pass
    raise RuntimeError(f"flash_attn could not be imported: {err}")

def kernel(module_name, path_hash):
    module_name = f"{module_name}_{path_hash}"
    raise ImportError(f"Cannot load module {module_name} from spec")

def retry(attempts):
    msg = "the attention kernel failed to compile"
    while attempts:
        logger.warning(msg)
        msg = compile_error()
"""
    assert templates(source) == [
        "Could not find the attention backend {} anywhere",
        "flash_attn could not be imported: {}",
        "Cannot load module {}_{} from spec",  # the parameter's value, then a suffix: no recursion
    ]


def test_text_extended_with_plus_equals_keeps_its_start():
    # xformers (ops/fmha/dispatch.py) and transformers (modeling_utils.py) build their reports so
    source = '''
def _run_priority_list(name, priority_list, inp):
    msg = f"""No operator found for `{name}` with inputs:
{textwrap.indent(_format_inputs_description(inp), '     ')}"""
    for op, not_supported in zip(priority_list, not_supported_reasons):
        msg += "\\n" + _format_not_supported_reasons(op, not_supported)
    raise NotImplementedError(msg)

def _autoset_attn_implementation(cls, config):
    message = f'Specified `attn_implementation="{config._attn_implementation}"` is not supported. The only possible arguments are `attn_implementation="eager"`'
    if cls._supports_flash_attn_2:
        message += ', `"attn_implementation=flash_attention_2"`'
    raise ValueError(message + ".")

def straight(x):
    msg = "Flash Attention is not available:"
    msg += f" {x}"
    raise ImportError(msg)
'''
    assert templates(source) == [
        "No operator found for `{}` with inputs:\n{}",  # extended in a loop: its start, then a field
        'Specified `attn_implementation="{}"` is not supported. The only possible arguments are `attn_implementation="eager"`, `"attn_implementation=flash_attention_2"`.',
        'Specified `attn_implementation="{}"` is not supported. The only possible arguments are `attn_implementation="eager"`.',
        "Flash Attention is not available: {}",
    ]
