# trimmed from axolotl-ai-cloud/axolotl src/axolotl/cli/chat.py at 067b021c8b87: only the lines the project scan reads
                    holder["output"] = self.model.generate(
