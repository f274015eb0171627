# trimmed from Lightning-AI/litgpt litgpt/model.py at 26857050fe3f: only the lines the project scan reads
        y = self.scaled_dot_product_attention(q, k, v, mask)
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=0.0, scale=scale, is_causal=mask is None
