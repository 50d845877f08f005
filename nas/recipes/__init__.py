"""End-to-end recipes: one function per method, driven by an experiment YAML."""
