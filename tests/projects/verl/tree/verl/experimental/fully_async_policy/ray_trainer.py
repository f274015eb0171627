# trimmed from volcengine/verl verl/experimental/fully_async_policy/ray_trainer.py at b178a3cd56f5: only the lines the project scan reads
class FullyAsyncRayPPOTrainer(RayPPOTrainer):
