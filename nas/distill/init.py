"""Student initialisation from the teacher: its word embeddings, factorised to the
student's width.

A student trained on a small budget cannot learn a 30k-word embedding table from its
data alone; starting from the teacher's table projected on its top principal components
gives every word a meaningful vector from the first step (AdaBERT, SPEC §2, and the
TinyBERT recipe's default, see ``recipes/tinybert.py``).
"""

from __future__ import annotations

from typing import Any

import torch

#: Where a student's word embeddings start: the teacher's table factorised by its
#: principal components (:func:`teacher_embedding_init`), or the fresh initialisation.
EMBEDDING_INITS = ("teacher-pca", "random")


def teacher_embedding_init(teacher_dir: str | None, dim: int) -> torch.Tensor:
    """The teacher's word embeddings factorised to ``dim`` (principal components), at the
    teacher's scale: ``(vocab, dim)``."""
    from nas.teacher import load_teacher

    weight = load_teacher(teacher_dir).get_input_embeddings().weight.detach().float()
    centred = weight - weight.mean(0, keepdim=True)
    # Exact SVD, not torch.pca_lowrank: the randomised one draws from the global RNG, so
    # the student's initialisation depended on whether the teacher came from the cache.
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    projected = centred @ vh[:dim].T
    return projected * (weight.std() / projected.std())  # keep the teacher's scale


def init_embeddings(model: Any, table: torch.Tensor) -> None:
    """Copy ``table`` into the leading columns of the word embeddings of ``model``'s
    ``emb`` node (a :class:`~nas.network.GraphNet` of any family)."""
    with torch.no_grad():
        emb = model.nodes["emb"].word_embeddings.weight
        emb[:, : table.shape[1]].copy_(table[: emb.shape[0]])


__all__ = ["EMBEDDING_INITS", "init_embeddings", "teacher_embedding_init"]
