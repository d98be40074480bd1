"""Built-in protocols (scratch, finetune, fewshot, linear, measure), with what they share: the
training loop, loaders, subsets, settings, frozen features and probes, and the `init` setting."""
