# trimmed from volcengine/verl verl/experimental/vla/models/openvla_oft/modeling_prismatic.py at b178a3cd56f5: only the lines the project scan reads
        """Borrowed from `LlamaForCausalLM` and simplified for batch size = 1; mirrors original PrismaticVLM logic."""
