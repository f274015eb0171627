# trimmed from axolotl-ai-cloud/axolotl src/axolotl/core/builders/base.py at 067b021c8b87: only the lines the project scan reads
            if self.cfg.torch_compile_backend:
                training_args_kwargs["torch_compile_backend"] = (
        """Apply allowlisted torch._inductor.config flags before torch.compile runs."""
