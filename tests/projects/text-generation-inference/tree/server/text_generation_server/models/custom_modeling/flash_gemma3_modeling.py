# trimmed from huggingface/text-generation-inference server/text_generation_server/models/custom_modeling/flash_gemma3_modeling.py at db931fcf42da: only the lines the project scan reads
class Gemma3FastRMSNorm(FastRMSNorm):
                attn_output = F.scaled_dot_product_attention(
                    padded_query,
                    padded_key,
                    padded_value,
                    attn_mask=attention_mask,
class Gemma3ForConditionalGeneration(nn.Module):
