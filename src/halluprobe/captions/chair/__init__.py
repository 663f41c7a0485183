"""CHAIR (Rohrbach et al. 2018): object hallucination in captions, computed as each published
evaluator computes it.

Two normaliser families, named and versioned like the text rules:

- ``chair@lemmatizer``: shikiw/OPERA's ``chair.py`` (2023-11-30) and the code that copies it:
  NLTK tokenisation, ``pos_tag``, WordNet lemmatizer (:mod:`.families`).
- ``chair@singularize``: the original (LisaAnne/Hallucination ``utils/chair.py``,
  Maxlinn/CHAIR-metric-standalone): pattern's ``singularize`` (:mod:`.singularize`), quirks
  included (``bus`` -> ``bu``, ``ties`` -> ``ty``).

Both share the synonym table, the double words and the 80 COCO categories (:mod:`.vocabulary`).
Ground truth: :mod:`.groundtruth`; the standard 500-image lists: :mod:`.lists`; scoring:
:mod:`.scoring`.
"""

from __future__ import annotations

__all__: list[str] = []
