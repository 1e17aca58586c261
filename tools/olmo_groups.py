"""OLMo-core's parameter-group overrides as tandem's `optim.group_overrides` writes them, for the
reference tools: AI2's default, and a group's options as torch's AdamW takes them."""

# AI2's OLMo 3 recipe: the embedding without weight decay (what an absent group_overrides means).
AI2_GROUP_OVERRIDES = [{"params": ["embeddings.weight"], "opts": {"weight_decay": 0.0}}]


def group_overrides(optim):
    """A run config's optim section's groups: absent, AI2's; null or [], none; else its own."""
    return optim.get("group_overrides", AI2_GROUP_OVERRIDES) or []


def torch_options(opts):
    """A group's options as torch's AdamW takes them (betas a tuple)."""
    return {k: tuple(v) if k == "betas" else v for k, v in opts.items()}
