"""Features in use: what the user's code does with the stack, each a fact with a source.

A feature is **in use** (declared by the user, or detected in the project with file:line
evidence), **not in use** (the user declared a list that leaves it out; or, for the features
whose evidence cannot hide, none was found), or **unknown**. A rule that needs an unknown feature
is "unknown" ("applies if you use flex_attention"), never "affected": an undeclared feature is not
assumed to be in use.

The model families the code runs (facts/model_families.py) are kept here too: the same scan and
the same log find them, and the same files carry them.

A scan's fact is **scoped**: it holds in the files of its evidence, not for the whole program. A
rule that needs several things (FlashAttention-2, a sliding window, a Gemma-2 model) is affected
only where one file shows them together (``together``); found only in separate files, they are
"applies if used together". What the user declares, or a log shows, holds everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attn_doctor.errors import InputError
from attn_doctor.facts.model_families import MODEL_FAMILIES

FEATURES: tuple[str, ...] = (
    "flash_attention_2",
    "flash_attn_required",
    "flash_attention_3",
    "flex_attention",
    "sdpa",
    "xformers",
    "torch_compile",
    "packed_sequences",
    "sliding_window",
    "softcap",
    "alibi",
    "attention_mask",
    "attention_mask_4d",
    "generate",
    "rotary_embedding",
    "source_build",
    "backward",
    "dropout",
    "fp8",
    "head_dim_256",
    "large_tensors",
    "varlen",
    "fla_delta_rule",
)

# Features whose evidence is a thing on disk that a scan cannot miss (a flash-attention source
# tree, or --source): without it they are not in use, rather than unknown.
EVIDENT_FEATURES = {"source_build": "no flash-attention source tree in the project and no --source"}
# what a provider that finds model families speaks of (add_later), besides features
MODELS = "model families"


@dataclass(frozen=True)
class FeatureFact:
    name: str  # a feature, or a model family (MODEL_FAMILIES) the code runs
    in_use: bool
    source: str  # "--feature", "--model", "pyproject.toml [tool.attn-doctor] features", "project scan", ...
    evidence: tuple[str, ...] = ()  # file:line where the project shows it, at most a few
    scoped: bool = False  # holds only in the files that show it (a project scan's find)


Provider = tuple[frozenset[str] | None, Callable[[], list[FeatureFact]]]


class FeatureSet:
    """The feature facts of one environment. ``declared`` closes the world: a feature the user
    did not list is not in use. Facts that cost work to gather (the project scan) come from
    providers, each run the first time a feature it can speak of is asked."""

    def __init__(self, facts: dict[str, FeatureFact] | None = None, declared: str | None = None) -> None:
        self._facts = dict(facts or {})
        self._models: dict[str, FeatureFact] = {}  # the model families found in use
        self.declared = declared  # where the declared list came from, if there is one
        # a project scan looked for the EVIDENT_FEATURES' things on disk: without one (--no-scan,
        # or a log from another machine) their absence is not known
        self.searched = False
        self._providers: list[Provider] = []
        # the scan's files and what each shows (features and model families), for ``together``
        self._scopes: list[tuple[str, frozenset[str]]] = []

    @property
    def facts(self) -> dict[str, FeatureFact]:
        self._gather(None)
        return self._facts

    def models(self) -> dict[str, FeatureFact]:
        """The model families the project or log shows in use (none found: which one is unknown)."""
        self._gather(MODELS)
        return self._models

    def add_later(
        self, provider: Callable[[], list[FeatureFact]], speaks_of: frozenset[str] | None = None
    ) -> None:
        """``provider`` gives facts about ``speaks_of`` (every feature when None), when asked."""
        self._providers.append((speaks_of, provider))

    def _gather(self, name: str | None) -> None:
        due = [p for p in self._providers if name is None or p[0] is None or name in p[0]]
        self._providers = [p for p in self._providers if p not in due]
        for _, provider in due:
            for fact in provider():
                self.add(fact)

    def state(self, name: str) -> tuple[bool | None, str]:
        """In use (True), not in use (False) or unknown (None), with the reason in words."""
        self._gather(name)
        fact = self._facts.get(name)
        if fact is not None:
            where = f" ({', '.join(fact.evidence[:2])})" if fact.evidence else ""
            return fact.in_use, f"{name} {'in use' if fact.in_use else 'not in use'}: {fact.source}{where}"
        if self.declared is not None:
            return False, f"{name} not in use: not declared in {self.declared}"
        if name in EVIDENT_FEATURES and self.searched:
            return False, f"{name} not in use: {EVIDENT_FEATURES[name]}"
        return None, f"applies if you use {name}"

    def evidence(self, name: str) -> tuple[str, ...]:
        fact = self.facts.get(name)
        return () if fact is None else fact.evidence

    def add_scopes(self, scopes: list[tuple[str, frozenset[str]]]) -> None:
        """The files a scan read, each with the names it shows (ScanResult.scopes)."""
        self._scopes.extend(scopes)

    def together(self, features: tuple[str, ...], families: tuple[str, ...]) -> str | None:
        """The first file that shows every scoped one of ``features`` with one of ``families`` in
        use (none asked: with the features alone); "" when nothing needs tying (fewer than two
        scoped things, or each holds everywhere); None when no file shows them together."""
        self._gather(None)
        self._gather(MODELS)
        scoped = {name for name in features if (fact := self._facts.get(name)) is not None and fact.scoped}
        found = [self._models[name] for name in families if name in self._models]
        family_scoped = bool(found) and all(fact.scoped for fact in found)
        if len(scoped) + family_scoped < 2:
            return ""
        wanted = {fact.name for fact in found} if family_scoped else set()
        for where, names in self._scopes:
            if scoped <= names and (not wanted or wanted & names):
                return where
        return None

    def in_use(self) -> list[str]:
        return sorted(name for name, fact in self.facts.items() if fact.in_use)

    def add(self, fact: FeatureFact) -> None:
        """Evidence adds to a declared list: a feature the project shows is in use, declared or not.
        A model family's fact goes with the model families."""
        facts = self._models if fact.name in MODEL_FAMILIES else self._facts
        known = facts.get(fact.name)
        if known is None:
            facts[fact.name] = fact
        elif known.in_use == fact.in_use:
            evidence = (*known.evidence, *fact.evidence)
            source = known.source if fact.source == known.source else f"{known.source}; {fact.source}"
            scoped = known.scoped and fact.scoped  # declared or from the log: it holds everywhere
            facts[fact.name] = FeatureFact(fact.name, fact.in_use, source, evidence, scoped)

    @classmethod
    def declare(cls, names: list[str], source: str) -> FeatureSet:
        """The user's own list (``--feature``, pyproject, an env file); a typo is an InputError."""
        for name in names:
            check_feature_name(name, source)
        return cls(facts={name: FeatureFact(name, True, source) for name in names}, declared=source)

    def declare_models(self, names: list[str], source: str) -> None:
        """The model families the user says the code runs (``--model``, pyproject), in place of
        those an env file brought; the scan's and the log's still add to them."""
        for name in names:
            check_model_family(name, source)
        self._models = {name: FeatureFact(name, True, source) for name in names}


def check_feature_name(name: object, source: str) -> None:
    _check_name(name, FEATURES, "feature", source)


def check_model_family(name: object, source: str) -> None:
    _check_name(name, tuple(MODEL_FAMILIES), "model family", source)


def _check_name(name: object, known: tuple[str, ...], what: str, source: str) -> None:
    """A name of the vocabulary, or an InputError with the nearest one and the whole list."""
    if isinstance(name, str) and name in known:
        return
    import difflib  # only for the error message

    guess = difflib.get_close_matches(str(name), known, n=1, cutoff=0.5)
    hint = f"did you mean {guess[0]!r}? " if guess else ""
    raise InputError(source, f"unknown {what} {name!r}: {hint}known: {', '.join(known)}")
