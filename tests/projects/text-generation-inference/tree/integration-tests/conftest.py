# trimmed from huggingface/text-generation-inference integration-tests/conftest.py at db931fcf42da: only the lines the project scan reads
                await self.client.generate("test")
