"""`attn-doctor explain`: the five seed bugs' logs, raw and noisy, name the right rule first; the
same message ranks differently on different stacks; hostile input finishes in bounded time; the
JSON follows its schema; the safe subset of symptom patterns is enforced."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource
from support import REPO, cli, write_rule

from attn_doctor.engine.patterns import LINE_CAP, UnsafePattern, analyse
from attn_doctor.explain.reader import LogReader

LOGS = Path(__file__).parent / "logs"
SCHEMAS = resources.files("attn_doctor") / "schemas"

# seed: (the stack it happened on, the rule that explains it)
SEEDS = {
    "a": (
        ["--pin", "transformers==4.44.0", "--gpu", "sm_90", "--feature", "flash_attention_2"]
        + ["--feature", "generate"],
        "gemma2-fa2-generate-4d-mask",
    ),
    "b": (
        ["--pin", "flash-linear-attention==0.5.2", "--gpu", "H100", "--feature", "rotary_embedding"]
        + ["--feature", "torch_compile"],
        "fla-rotary-dim-exceeds-head-dim",
    ),
    "c": (
        ["--gpu", "sm_90", "--feature", "source_build", "--feature", "flash_attention_3"],
        "fa3-hopper-pipelineparams-build",
    ),
    "d": (
        ["--pin", "transformers==4.51.0", "--feature", "flex_attention"],
        "transformers-flex-blockmask-no-dim",
    ),
    "e": (
        ["--pin", "transformers==4.51.0", "--feature", "flex_attention", "--feature", "generate"],
        "transformers-flex-pad-none-key-length",
    ),
}
ASSERT_LINE = (
    "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:144: operator(): block: [{b},0,0], "
    'thread: [{t},0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && "index out of bounds"` failed.'
)


@pytest.fixture(autouse=True)
def _hermetic(no_gpu) -> None:
    """No nvidia-smi or nvcc on PATH: only the facts each test gives."""


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schemas = {
        name: json.loads((SCHEMAS / name).read_text())
        for name in ("environment.schema.json", "explain.schema.json")
    }
    registry = Registry().with_resources(
        [(f"attn-doctor/{name}", Resource.from_contents(schema)) for name, schema in schemas.items()]
    )
    return jsonschema.Draft202012Validator(schemas["explain.schema.json"], registry=registry)


def explain(site, log: Path, *args: str):
    return cli("explain", log, "--path", site.path, *args)


def explain_json(site, log: Path, *args: str) -> dict:
    result = explain(site, log, "--format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def ranked(document: dict) -> list[tuple[str, str]]:
    return [(cause["id"], cause["verdict"]) for cause in document["causes"]]


def seed_bytes(seed: str) -> bytes:
    return (LOGS / f"seed_{seed}.log").read_bytes()


# Noise real logs carry, each applied to a whole log.
def ansi(data: bytes) -> bytes:
    """Colour every line, a bold code in the middle of it (inside the message), a title sequence."""
    lines = data.split(b"\n")
    coloured = [
        b"\x1b[31m" + line[: len(line) // 2] + b"\x1b[1;33m" + line[len(line) // 2 :] + b"\x1b[0m"
        for line in lines
    ]
    return b"\x1b]0;train.py\x07" + b"\n".join(coloured)


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def chinese(data: bytes) -> bytes:
    before = "训练开始：第 1 轮，共 3 轮\n数据加载完成，样本数 120000\n错误信息如下：\n".encode()
    after = "程序异常退出，请检查显存和版本。\n".encode()
    gbk = "显存占用过高\n".encode("gbk")  # not UTF-8: a log mixing encodings
    return before + gbk + data + after


def progress_bars(data: bytes) -> bytes:
    redraws = b"".join(
        b"\rTraining: %3d%%|%-10s| %d/500" % (p, b"#" * (p // 10), p * 5) for p in range(0, 101, 5)
    )
    return redraws + b"\n" + data


def per_thread_asserts(data: bytes) -> bytes:
    """5000 per-thread device asserts before the log, as a GPU prints them."""
    asserts = "\n".join(ASSERT_LINE.format(b=i // 128, t=i % 128) for i in range(5000))
    return asserts.encode() + b"\n" + data


def utf16(data: bytes) -> bytes:
    """PowerShell's `python train.py > log.txt` writes UTF-16 with a byte-order mark."""
    return data.decode("utf-8").encode("utf-16")


NOISE = [ansi, crlf, chinese, progress_bars, per_thread_asserts, utf16]


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_seed_log_names_its_rule_first(site, tmp_path, validator, seed):
    stack, rule = SEEDS[seed]
    document = explain_json(site, LOGS / f"seed_{seed}.log", *stack)
    validator.validate(document)
    assert ranked(document)[0] == (rule, "affected"), ranked(document)
    assert document["exit_code"] == 0


@pytest.mark.parametrize("noise", NOISE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_noisy_seed_log_names_its_rule_first(site, tmp_path, seed, noise):
    stack, rule = SEEDS[seed]
    log = tmp_path / "noisy.log"
    log.write_bytes(noise(seed_bytes(seed)))
    document = explain_json(site, log, *stack)
    assert ranked(document)[0] == (rule, "affected"), ranked(document)


def test_text_report_names_cause_fix_reference_and_repro(site):
    stack, _ = SEEDS["a"]
    result = explain(site, LOGS / "seed_a.log", *stack)
    assert result.exit_code == 0, result.stderr
    first = result.stdout.split("\n\n")[1]
    assert first.startswith("1. ✗ gemma2-fa2-generate-4d-mask [error; affected on this stack]")
    assert "   line 3: " in first and "   line 5: " in first and "index out of bounds" in first
    assert "fix: Upgrade transformers to 4.44.1" in first
    assert "pins: transformers>=4.44.1" in first
    assert "see: https://github.com/huggingface/transformers/pull/32553" in first
    assert "repro: attn-doctor repro gemma2-fa2-generate-4d-mask" in first


def test_same_message_ranks_by_stack(site):
    """The index-out-of-bounds assert is a symptom of two rules: the stack decides which is first."""
    log = LOGS / "seed_a.log"
    generate = explain_json(
        site, log, "--pin", "transformers==4.44.0", "--feature", "flash_attention_2", "--feature", "generate"
    )
    assert ranked(generate) == [
        ("gemma2-fa2-generate-4d-mask", "affected"),
        ("transformers-fa2-4d-attention-mask", "not-affected"),
    ]
    mask_4d = ["--feature", "flash_attention_2", "--feature", "attention_mask_4d"]
    newer = explain_json(site, log, "--pin", "transformers==4.51.0", *mask_4d)
    assert ranked(newer) == [
        ("transformers-fa2-4d-attention-mask", "affected"),
        ("gemma2-fa2-generate-4d-mask", "not-affected"),
    ]
    text = explain(site, log, "--pin", "transformers==4.51.0", *mask_4d).stdout
    why = "transformers 4.51.0 is not in ==4.44.0"
    assert f"2. - gemma2-fa2-generate-4d-mask [error; symptom matches, but {why}]" in text


def test_repeated_asserts_are_counted_not_listed(site, tmp_path):
    log = tmp_path / "asserts.log"
    log.write_bytes(per_thread_asserts(seed_bytes("a")))
    stack, _ = SEEDS["a"]
    match = explain_json(site, log, *stack)["causes"][0]["matches"][0]
    assert match["lines"] == 5003 and match["first"]["line"] == 1 and match["last"]["line"] == 5005
    text = explain(site, log, *stack).stdout
    assert "... 5,001 more matching lines ..." in text
    assert len(text.splitlines()) < 40


def test_line_numbers_count_crlf_and_cr_as_line_ends(site, tmp_path):
    log = tmp_path / "mixed.log"
    log.write_bytes(b"one\r\ntwo\rthree\n" + seed_bytes("d"))
    match = explain_json(site, log, *SEEDS["d"][0])["causes"][0]["matches"][0]
    assert match["first"]["line"] == 3 + 11
    assert match["first"]["text"] == "AttributeError: 'BlockMask' object has no attribute 'dim'"


def test_clean_log_has_no_known_cause(site, validator):
    result = explain(site, LOGS / "clean.log", "--pin", "transformers==4.44.0")
    assert result.exit_code == 1, result.stderr
    assert "No known cause" in result.stdout
    document = explain_json(site, LOGS / "clean.log")
    validator.validate(document)
    assert document["causes"] == [] and document["exit_code"] == 1


def load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "explain_throughput", REPO / "benchmarks" / "explain_throughput.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_100_mb_log_in_bounded_time(site, tmp_path):
    benchmark = load_benchmark()
    log = tmp_path / "train.log"
    size = benchmark.write_training_log(log, 100, seed_bytes("a").decode())
    stack, rule = SEEDS["a"]
    start = time.perf_counter()
    document = explain_json(site, log, *stack)
    seconds = time.perf_counter() - start
    print(f"explain: {size / 1e6:.1f} MB in {seconds:.2f} s ({size / 1e6 / seconds:.1f} MB/s)")
    assert ranked(document)[0] == (rule, "affected")
    assert document["input"]["bytes"] == size
    assert seconds < 60


def test_binary_junk(site, tmp_path):
    junk = random.Random(0).randbytes(2_000_000)
    log = tmp_path / "junk.bin"
    log.write_bytes(junk)
    assert explain(site, log).exit_code == 1
    log.write_bytes(junk + b"\n" + seed_bytes("d") + junk)
    assert ranked(explain_json(site, log, *SEEDS["d"][0]))[0][0] == SEEDS["d"][1]


def test_50_mb_line_without_a_line_break(site, tmp_path):
    log = tmp_path / "one-line.log"
    with log.open("wb") as out:
        for _ in range(50):
            out.write(b"x" * 1_000_000)
    start = time.perf_counter()
    result = explain(site, log)
    assert result.exit_code == 1 and "1 line;" in result.stdout
    with log.open("ab") as out:
        out.write(b"\n" + seed_bytes("e"))
    match = explain_json(site, log, *SEEDS["e"][0])["causes"][0]["matches"][0]
    print(f"two runs over a 50 MB line: {time.perf_counter() - start:.2f} s")
    assert match["first"]["line"] == 1 + 9


def test_backtracking_bait_finishes_fast(site, tmp_path):
    """Lines built to make `.*` and `[^b]*` backtrack, against the database and a user rule."""
    rule = write_rule(tmp_path / "rules", "bait", symptoms="""['aaaa[^b]*c', 'aaaa.*z']""")
    lines = [
        "a" * 100_000,
        "a" * 4000 + "bc" + "a" * 96_000,
        "flash_attn_2_cuda" * 6000 + " undefined symbol",
        "FlashAttention backward for head dim " * 3000,
    ]
    log = tmp_path / "bait.log"
    log.write_text("".join(f"{i:03d} {line}\n" for i, line in enumerate(lines * 50)))  # distinct lines
    start = time.perf_counter()
    result = explain(site, log, "--rules", rule)
    seconds = time.perf_counter() - start
    print(f"backtracking bait: {seconds:.2f} s")
    assert result.exit_code == 1, result.stdout + result.stderr
    assert seconds < 30


@pytest.mark.parametrize("command", ["explain", "validate"])
def test_catastrophic_symptom_is_rejected(site, tmp_path, command):
    rule = write_rule(tmp_path / "rules", "catastrophic", symptoms="""['(a+)+$']""")
    if command == "explain":
        result = explain(site, LOGS / "seed_d.log", "--rules", rule, *SEEDS["d"][0])
    else:
        result = cli("rules", "validate", rule)
    assert result.exit_code == 2
    errors = result.stderr.splitlines()
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert errors[0].startswith("attn-doctor: error: ")
    assert "catastrophic.toml" in errors[0] and "field 'symptoms[0]'" in errors[0] and "nested" in errors[0]


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a+)+$", "nested"),
        ("(.*)*xxxx", "nested"),
        ("(?:ab)*xxxx", "nested"),
        ("(abcd)\\1", "backreferences"),
        ("abcd(?=x)", "look-around"),
        ("(?i)abcd", "case-insensitive"),
        ("abcd.*e.*f", "backtrack too much"),
        ("a|bcdef", "literal of at least 4"),
        ("ab.cd", "literal of at least 4"),
        ("abcd\\nefgh", "one line"),
    ],
)
def test_unsafe_patterns_are_named(pattern, reason):
    with pytest.raises(UnsafePattern, match=reason):
        analyse(pattern)


def test_required_literal():
    shape = analyse('no suitable user-defined conversion from "PipelineParamsK".* to "PipelineParamsV"')
    assert shape.literal == 'no suitable user-defined conversion from "PipelineParamsK"'
    assert shape.runs == (shape.literal, ' to "PipelineParamsV"') and not shape.plain
    assert analyse("x(?:abc)?yzzz").literal == "yzzz"
    assert analyse("'BlockMask' object has no attribute 'dim'").plain
    assert analyse("^Triton Error \\[CUDA\\]: device kernel image is invalid$").literal.startswith(
        "Triton Error [CUDA]"
    )


def test_reader_is_the_same_whatever_the_chunk_size():
    """Line ends split between chunks, long lines across chunks, escapes: one result."""
    rng = random.Random(7)
    tokens = [b"abc ", b"\r", b"\n", b"\r\n", b"\x1b[31m", b"\x1b]0;t\x07", "错误".encode(), b"x" * 5000]
    data = b"".join(rng.choice(tokens) for _ in range(3000))
    results = []
    for chunk in (1, 7, 4096, 1 << 20):
        reader = LogReader(io.BytesIO(data), "data", chunk_bytes=chunk)
        results.append((b"".join(block.text for block in reader), reader.lines))
    assert all(result == results[0] for result in results)
    text, lines = results[0]
    universal = io.TextIOWrapper(io.BytesIO(data), encoding="latin-1", newline=None).readlines()
    assert lines == len(universal)
    assert b"\x1b" not in text and max(map(len, text.split(b"\n"))) <= LINE_CAP


def test_stdin(tmp_path):
    stack, rule = SEEDS["d"]
    for args in (["-"], []):
        result = subprocess.run(
            [sys.executable, "-m", "attn_doctor", "explain", *args, "--path", tmp_path, *stack],
            input=seed_bytes("d"),
            capture_output=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert f"1. ✗ {rule} " in result.stdout.decode()
        assert "attn-doctor explain: stdin" in result.stdout.decode()


@pytest.mark.parametrize("kind", ["missing", "directory", "under-a-file", "unreadable"])
def test_bad_log_argument_is_one_line(tmp_path, kind):
    target = tmp_path / "train.log"
    if kind == "directory":
        target.mkdir()
    elif kind == "under-a-file":
        (tmp_path / "notes").write_text("x")
        target = tmp_path / "notes" / "train.log"
    elif kind == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        target.write_text("x")
        target.chmod(0)
    result = cli("explain", target)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"attn-doctor: error: {target}: ") and result.stderr.count("\n") == 1
