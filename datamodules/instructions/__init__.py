"""Instruction-following data with backdoors: the seeded grammar, triggers, readers, dataset, datamodule."""
