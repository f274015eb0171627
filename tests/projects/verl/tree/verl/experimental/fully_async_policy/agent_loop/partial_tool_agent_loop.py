# trimmed from volcengine/verl verl/experimental/fully_async_policy/agent_loop/partial_tool_agent_loop.py at b178a3cd56f5: only the lines the project scan reads
                output = await self.server_manager.generate(
