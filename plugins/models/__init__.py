"""Built-in model families: one family per plugin file (vit, hybrid, resnetv2, torchvision_zoo), each
with the support code it needs beside it (the ViT architecture, the paper's .npz layouts)."""
