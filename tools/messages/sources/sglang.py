"""SGLang's attention backends and the checks that choose them (python/sglang of its wheel).

sglang/srt/layers/attention/ holds the backends from 0.3.x (0.3.0's was one file,
srt/layers/attention_backend.py); server_args.py checks the --attention-backend asked for against
the GPU and the installed kernels (arg_groups/attention_hook.py in later releases); model_runner.py
(attention_registry.py, model_runner_components/attention_backend_setup.py later) builds it. Like
vLLM's, SGLang's backend choice speaks at INFO level, so ``logger.info`` messages are read too.
"""

from __future__ import annotations

from tools.messages.sources.vllm import EngineTrees

SGLANG_INCLUDE = (
    "sglang/srt/layers/attention_backend.py",  # 0.3.0
    "sglang/srt/layers/attention/**/*.py",  # flashinfer, triton, fa3, flashmla, torch_native, registry
    "sglang/srt/server_args.py",  # "... attention backend requires ..." checks
    "sglang/srt/model_executor/model_runner.py",  # "Invalid attention backend", the backend's choice
    "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py",  # later home of it
    "sglang/srt/arg_groups/attention_hook.py",  # later home of server_args' attention checks
    "sglang/srt/arg_groups/platform_hook.py",
    "sglang/srt/platforms/*.py",
)

# pure-Python wheels to 0.5.10; 0.5.11 on are cp311 manylinux_2_34 wheels
SGLANG_TAGS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64")

SGLANG = EngineTrees("sglang", "sglang", SGLANG_INCLUDE, floor="0.3.0", platforms=SGLANG_TAGS)
