# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/models/custom_modeling/flash_llama4_modeling.py at db931fcf42da: only the lines the project scan reads
            attn_output = torch.nn.functional.scaled_dot_product_attention(
                query,
                key,
                value,
                attn_mask=causal_mask,
class Llama4TextModel(nn.Module):
