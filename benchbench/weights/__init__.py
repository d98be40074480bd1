"""Weights in: checkpoint files read without trusting them (`files`: .safetensors, torch files, .npz),
a checkpoint's own configuration and evaluation transform (`config`), the local Hugging Face cache
(`hub`), class-id lists of a model's head (`classmap`), and `checkpoints`, which loads any of them
into a model through its family's spec (key layouts, adapting a head or the input channels).

Imports: the contract (`specs`, `errors`) and `archives`; never the store, the run layer or above.
"""
