"""Auto-Probe: hallucination-inducing descriptions -> extracted objects -> cleaning -> detector
checks -> existence and AttriBait questions (issue 7; design note: docs/design/autoprobe.md).

Submodules import their heavy dependencies (nltk, inflect, spacy, torch, transformers) lazily.
"""

__all__: list[str] = []
