# trimmed from OpenRLHF/OpenRLHF examples/python/agent_func_openai_server_executor.py at 3c3be6234e0c: only the lines the project scan reads
            output = await executor.llm_engine.generate(prompt_token_ids, sp)
