"""The names of the run presets, and the one a command uses when none is named. Kept
apart from `stages.config` (which builds them) so that the CLI can name them without
importing the configuration tree; model shapes have names of their own
(`model.core.config.PRESETS`: tiny, small, gpt2_125m, ...)."""

RUN_PRESETS = ("default", "tiny", "smoke")
DEFAULT_PRESET = "tiny"
