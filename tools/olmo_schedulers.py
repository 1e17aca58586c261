"""OLMo-core's scheduler for a tandem `scheduler:` section, shared by the reference tools.

tandem's scheduler keys are OLMo-core's field names, so a section maps onto OLMo-core's classes
one to one; nested sections (sequential's schedulers, composable's stages, override decays) are
built the same way. tandem's own `stitched` (two schedules switched at a step) and the aliases
(`linear`, `cosine_with_warmup`, `half_cosine_with_warmup`) are assembled from OLMo-core's classes.
"""
from dataclasses import dataclass


def olmo_scheduler(section):
    """An olmo_core.optim.scheduler.Scheduler for a tandem `scheduler:` mapping."""
    from olmo_core.optim import scheduler as sch

    classes = {"constant": sch.ConstantScheduler, "constant_with_warmup": sch.ConstantWithWarmup,
               "cos_with_warmup": sch.CosWithWarmup, "cosine_with_warmup": sch.CosWithWarmup,
               "half_cos_with_warmup": sch.HalfCosWithWarmup,
               "half_cosine_with_warmup": sch.HalfCosWithWarmup,
               "linear_with_warmup": sch.LinearWithWarmup, "wsd": sch.WSD,
               "inv_sqrt_with_warmup": sch.InvSqrtWithWarmup, "power_lr": sch.PowerLR,
               "cos_with_warmup_and_linear_decay": sch.CosWithWarmupAndLinearDecay,
               "exponential": sch.ExponentialScheduler, "wsds": sch.WSDS,
               "sequential": sch.SequentialScheduler, "composable": sch.ComposableScheduler}
    name = section["name"]
    kw = {k: v for k, v in section.items() if k != "name"}
    if "units" in kw:
        kw["units"] = sch.SchedulerUnits(kw["units"])
    if name == "stitched":
        return _stitched(sch)(first=olmo_scheduler(kw["first"]), switch_step=kw["switch_step"],
                              second=olmo_scheduler(kw["second"]), **(
                                  {"units": kw["units"]} if "units" in kw else {}))
    if name == "linear":  # tandem's stage-2 anneal: no warmup and a floor of 0 unless given
        kw.setdefault("alpha_f", 0.0)
        if "warmup" not in kw and "warmup_steps" not in kw and "warmup_fraction" not in kw:
            kw["warmup"] = 0
        name = "linear_with_warmup"
    if name in ("wsd", "power_lr", "cos_with_warmup_and_linear_decay") and (
            "decay" in kw or "decay_steps" in kw):
        kw["decay_fraction"] = None  # OLMo-core's default fraction would clash with `decay`
    if "schedulers" in kw:
        kw["schedulers"] = [olmo_scheduler(s) for s in kw["schedulers"]]
    if "stages" in kw:
        kw["stages"] = [sch.ComposableSchedulerStage(**s) for s in kw["stages"]]
    if kw.get("override_decay"):
        kw["override_decay"] = sch.OverrideDecay(**kw["override_decay"])
    return classes[name](**kw)


def _stitched(sch):
    @dataclass
    class Stitched(sch.Scheduler):
        """`first` up to and including `switch_step`, `second` after (tandem's `stitched`)."""
        first: sch.Scheduler = None
        switch_step: int = 0
        second: sch.Scheduler = None

        def get_lr(self, initial_lr, current, t_max):
            part = self.first if current <= self.switch_step else self.second
            return part.get_lr(initial_lr, current, t_max)

    return Stitched


def trainer_durations(cfg):
    """(steps to train, OLMo-core's Trainer.max_steps, its max_tokens where the duration is in
    tokens, else None) of a tandem run config's trainer.max_steps or max_duration and hard_stop.
    Durations in epochs depend on the data's size: ValueError."""
    t, batch = cfg["trainer"], int(cfg["data"]["global_batch_size"])

    def due(d, key):
        if d["unit"] == "steps":
            return int(d["value"]), None
        if d["unit"] == "tokens":
            tokens = int(float(d["value"]))
            return -(-tokens // batch), tokens
        raise ValueError(f"trainer.{key} in {d['unit']}: give steps or tokens")

    max_steps, max_tokens = ((int(t["max_steps"]), None) if t.get("max_steps") is not None
                             else due(t["max_duration"], "max_duration"))
    stop = due(t["hard_stop"], "hard_stop")[0] if t.get("hard_stop") else max_steps
    return min(max_steps, stop), max_steps, max_tokens


def scheduled_lr(scheduler, initial_lr, step, max_steps, global_batch_tokens, max_tokens=None):
    """The lr at global step `step` (1-based) as OLMo-core's trainer feeds its scheduler: steps
    against max_steps, or tokens seen including this batch against max_tokens (the trainer's
    Trainer.max_tokens: a duration in tokens, or max_steps x the batch)."""
    from olmo_core.optim.scheduler import SchedulerUnits

    if scheduler.units == SchedulerUnits.tokens:
        return scheduler.get_lr(initial_lr, step * global_batch_tokens,
                                max_tokens or max_steps * global_batch_tokens)
    return scheduler.get_lr(initial_lr, step, max_steps)
