# trimmed from volcengine/verl verl/experimental/dynamic_dataset/dynamicgen_dataset.py at b178a3cd56f5: only the lines the project scan reads
        new_data = self.data_generator.generate(self)
