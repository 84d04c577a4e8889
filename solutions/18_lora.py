"""Solution of notebook 18's build-it (checked by tests/test_exercises.py)."""


def merge_and_unload(model):
    """Merge every LoRALinear of `model` into its base layer (W <- W + (alpha / r) B A)
    and put that nn.Linear back in its place (its parameters stay frozen, as add_lora
    left them); returns the names replaced."""
    names = [name for name, m in model.named_modules() if hasattr(m, "lora_A")]
    for name in names:
        layer = model.get_submodule(name)
        if not layer.merged:
            layer.merge()  # the update inside W: the base layer alone computes it now
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer.base)  # the plain nn.Linear, A and B gone
    return names
