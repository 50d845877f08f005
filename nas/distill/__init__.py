"""Distillation toolkit: losses (SPEC §2-§5), AdaBERT probes (§2), teacher-output cache."""
