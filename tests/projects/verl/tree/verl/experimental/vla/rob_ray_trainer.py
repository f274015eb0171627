# trimmed from volcengine/verl verl/experimental/vla/rob_ray_trainer.py at b178a3cd56f5: only the lines the project scan reads
class RobRayPPOTrainer(RayPPOTrainer):
