"""Built-in reporters: MLflow (`mlflow`) and Weights & Biases offline (`wandb`), each behind its own
extra of benchbench; `cells` is what they share (a cell's params, metrics, tags and name)."""
