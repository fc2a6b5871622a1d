"""Where ``ResumableTrainerMixin`` must stand in a class's bases: before every ``transformers.Trainer``
(else the Trainer's methods shadow it and the class silently trains the stock order), and with one."""

from __future__ import annotations

from shufflepoint._errors import Plain, refusal


def refuse_a_trainer_before_the_mixin(cls: type, mixin: type) -> None:
    """``TypeError`` when a ``transformers.Trainer`` comes before ``ResumableTrainerMixin`` in ``cls``'s
    method resolution order: its methods (``get_train_dataloader``, ``train``, ``_save_checkpoint``)
    would then shadow the mixin's, and the class would silently be the stock Trainer (the stock order,
    no loader state in the checkpoints).

    ``class X(trl.SFTTrainer, ResumableTrainerMixin)`` has the order X, SFTTrainer, Trainer, mixin: refused.
    ``class X(ResumableTrainerMixin, trl.SFTTrainer)`` has X, mixin, SFTTrainer, Trainer: right.
    """
    import transformers

    order = cls.__mro__
    mixin_at = order.index(mixin)
    shadowing = [c for c in order[:mixin_at]
                 if issubclass(c, transformers.Trainer) and not issubclass(c, mixin)]
    if shadowing:
        bases = ", ".join(base.__name__ for base in cls.__bases__)
        raise TypeError(refusal(
            f"class {cls.__name__}({bases})", Plain(f"{shadowing[0].__name__} comes before ResumableTrainerMixin"),
            f"the mixin first in the method resolution order (it is "
            f"{' -> '.join(c.__name__ for c in order[:mixin_at + 1])})",
            f"list the mixin first, class {cls.__name__}(ResumableTrainerMixin, {shadowing[0].__name__}) (or "
            "subclass shufflepoint.integrations.transformers.Trainer)",
            why="the Trainer's own methods would shadow the mixin's: the class would silently train the stock order, "
            "with no loader state in its checkpoints"))


def refuse_a_mixin_without_a_trainer(cls: type) -> None:
    import transformers

    if not issubclass(cls, transformers.Trainer):
        raise TypeError(refusal(
            cls.__name__, Plain("ResumableTrainerMixin found no transformers.Trainer among its bases"),
            "a transformers.Trainer base", f"class {cls.__name__}(ResumableTrainerMixin, transformers.Trainer) (or "
            "TRL's SFTTrainer, or any other Trainer subclass), mixin first",
            why="the mixin changes a Trainer's loader and checkpoints"))
