"""Distillation toolkit: losses (SPEC §2-§5), AdaBERT probes (§2), teacher-output cache,
the unlabeled-text pieces shared by general distillation and warm-up (``general``), and
EfficientBERT's warm-up-KD supernet (§3, ``warmup``)."""
