"""Compressing a fine-tuned teacher into its own sub-networks (method compress,
docs/reference.md#teacher-compression).

:mod:`nas.compress.importance` sorts the teacher's heads, FFN neurons and hidden channels
by importance, so that the leading slices the ``bert-subnet`` space keeps hold the most
important weights.
"""
