"""Distillation toolkit: the losses of TinyBERT, MobileBERT and AdaBERT, AdaBERT's probes,
the teacher-output cache, the unlabeled-text pieces shared by general distillation and warm-up
(``general``), and EfficientBERT's warm-up-KD supernet (``warmup``). The constants of each are
in docs/reference.md (#tinybert, #mobilebert, #adabert, #efficientbert)."""
