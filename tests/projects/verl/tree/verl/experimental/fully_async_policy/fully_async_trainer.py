# trimmed from volcengine/verl verl/experimental/fully_async_policy/fully_async_trainer.py at b178a3cd56f5: only the lines the project scan reads
class FullyAsyncTrainer(FullyAsyncRayPPOTrainer):
