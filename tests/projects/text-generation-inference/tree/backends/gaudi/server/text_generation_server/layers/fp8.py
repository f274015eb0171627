# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/layers/fp8.py at db931fcf42da: only the lines the project scan reads
quant_dtype: torch.dtype = torch.float8_e4m3fn
