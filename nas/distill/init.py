"""Student initialisation from the teacher: its word embeddings, factorised to the
student's width.

A student trained on a small budget cannot learn a 30k-word embedding table from its
data alone; starting from the teacher's table projected on its top principal components
gives every word a meaningful vector from the first step (AdaBERT, docs/reference.md#adabert, and
the TinyBERT recipe's default, see ``recipes/tinybert.py``).
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

    # on the CPU, wherever the run computes: the same initial table on every device
    weight = load_teacher(teacher_dir).get_input_embeddings().weight.detach().float().cpu()
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
        emb = model.word_embeddings()
        emb[:, : table.shape[1]].copy_(table[: emb.shape[0]])


class TeacherEmbeddings:
    """The teacher's factorised word table for a model of any space: every node with a
    ``word_embeddings`` table of the teacher's vocabulary starts from the teacher's top
    principal components at its width (one SVD per width, kept); a model without such a
    node is left as it is. Called on each freshly built child or supernet."""

    def __init__(self, teacher_dir: str | None) -> None:
        self.teacher_dir = teacher_dir
        self.tables: dict[int, torch.Tensor] = {}

    def __call__(self, model: Any) -> int:
        """Initialise ``model``'s word tables; returns how many were set."""
        done = 0
        for node in getattr(model, "nodes", {}).values():
            table = getattr(getattr(node, "word_embeddings", None), "weight", None)
            if table is None:
                continue
            width = int(table.shape[1])
            if width not in self.tables:
                self.tables[width] = teacher_embedding_init(self.teacher_dir, width)
            source = self.tables[width]
            if source.shape[0] != table.shape[0]:
                continue  # another vocabulary: its rows mean other words
            with torch.no_grad():
                table.copy_(source)
            done += 1
        return done


__all__ = ["EMBEDDING_INITS", "TeacherEmbeddings", "init_embeddings", "teacher_embedding_init"]
