"""Which data files of a project are configs: the project scan's evidence comes from code and
configs, never from data (saved reports, datasets, results, a notebook's outputs).

A JSON or YAML file counts when its top level holds a key that a known framework's config has at
the top level (transformers' model config and TrainingArguments, TRL, axolotl, LLaMA-Factory,
torchtune, DeepSpeed, accelerate); a TOML file only as the project's ``pyproject.toml``; a
notebook by its code cells alone.
"""

from __future__ import annotations

import json
import re

CONFIG_KEYS = frozenset(
    {
        # transformers model config (config.json) and TrainingArguments / TRL configs
        "architectures", "model_type", "attn_implementation", "_attn_implementation", "torch_dtype",
        "num_attention_heads", "hidden_size", "head_dim", "attention_dropout", "sliding_window",
        "attn_logit_softcapping", "rope_theta", "torch_compile_mode",
        "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
        "num_train_epochs", "max_steps", "bf16", "torch_compile", "torch_compile_backend", "packing",
        "padding_free", "model_name_or_path", "model_init_kwargs", "max_seq_length",
        # axolotl
        "base_model", "datasets", "sequence_len", "sample_packing", "flash_attention", "sdp_attention",
        "xformers_attention", "flex_attention", "micro_batch_size", "adapter",
        # LLaMA-Factory
        "stage", "finetuning_type", "template", "flash_attn", "cutoff_len", "neat_packing",
        # torchtune
        "model", "tokenizer", "optimizer", "compile", "packed", "dataset",
        # DeepSpeed, accelerate
        "zero_optimization", "train_micro_batch_size_per_gpu", "compute_environment",
        "distributed_type", "mixed_precision",
    }
)  # fmt: skip
_YAML_TOP_KEY = re.compile(rb"^([A-Za-z_][\w.-]{0,60})\s*:", re.M)
# attn-doctor's own tables in the pyproject, up to the next table: what the user declares there
# (``models = ["gemma2"]``) is a declaration with its own source, not evidence the code gives
OWN_TABLES = re.compile(rb"^[ \t]*\[tool\.attn-doctor[\].][^\n]*(?:\n(?![ \t]*\[)[^\n]*)*", re.M)


def readable_text(name: str, data: bytes) -> bytes | None:
    """The part of a file the scan may read for evidence, or None when it is not evidence at all."""
    suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if suffix == "py":
        return data
    if suffix == "toml":
        return OWN_TABLES.sub(_lines_only, data) if name == "pyproject.toml" else None
    if suffix in ("yaml", "yml"):
        return data if CONFIG_KEYS.intersection(key.decode() for key in _YAML_TOP_KEY.findall(data)) else None
    parsed = _json(data)
    if suffix == "ipynb":
        return _code_cells(parsed)
    if suffix == "json":
        return data if isinstance(parsed, dict) and CONFIG_KEYS.intersection(parsed) else None
    return None


def _lines_only(table: re.Match[bytes]) -> bytes:
    """The table's line breaks alone: the lines below keep their numbers."""
    return b"\n" * table[0].count(b"\n")


def _json(data: bytes) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _code_cells(notebook: object) -> bytes | None:
    """The notebook's code cells, one after another (outputs and markdown are not evidence)."""
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return None
    sources = []
    for cell in notebook["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append("".join(source) if isinstance(source, list) else str(source))
    return "\n".join(sources).encode("utf-8", "replace")
