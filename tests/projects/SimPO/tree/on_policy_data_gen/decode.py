# trimmed from princeton-nlp/SimPO on_policy_data_gen/decode.py at 1b3e8f3528a2: only the lines the project scan reads
os.environ["VLLM_ATTENTION_BACKEND"] = "FLASHINFER" # this is recommended for gemma-2 models; otherwise it is not needed
outputs = llm.generate(conversations, sampling_params)
