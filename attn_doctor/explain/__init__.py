"""`attn-doctor explain`: name the known causes of an error in a traceback or a whole training log.

Time is bounded on any input, whatever its size or content:

- reader.py reads fixed-size chunks and cuts every line to LINE_CAP (4 KiB) bytes, so memory is
  one chunk plus one line, and no line handed on is longer than LINE_CAP;
- symptoms.py finds the lines containing each pattern's required literal with one RE2 set (a DFA
  over all the literals at once) per window of a chunk, then per line of a window it matched;
- only those lines, and only when they hold all the pattern's literals in order, meet a regular
  expression, once per distinct recent line; every pattern is in the safe subset that rule
  validation enforces (engine/patterns.py): no backreferences or look-around, no nested
  quantifiers, at most MAX_WAYS ways to split a line, so one search of a line costs at most
  LINE_CAP x MAX_WAYS steps (the shipped patterns, one ``.*`` between literals, match at the first
  attempt on any line that passes the in-order test).

Hence the time is linear in the input's size, whatever the number of literals (without RE2: bytes
times distinct literals, by substring search), plus a bounded cost per candidate line.
benchmarks/explain_throughput.py measures it on hostile logs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from attn_doctor.config import Config
from attn_doctor.engine.loader import database_path, load_rules
from attn_doctor.engine.matcher import Verdict, match
from attn_doctor.explain.cause_notes import annotate
from attn_doctor.explain.origins import ErrorLines, ImpliedReleases, Origin, implied_releases, origins
from attn_doctor.explain.rank import Cause, outside_its_package, rank
from attn_doctor.explain.reader import Block, LogReader, open_log
from attn_doctor.explain.reasoners import Evidence, Reasoned, reason
from attn_doctor.explain.scan import scan
from attn_doctor.explain.symptoms import compile_symptoms
from attn_doctor.explain.unexplained import Unexplained, unexplained
from attn_doctor.facts import log_facts  # the module: log_facts reads logs with this package's reader
from attn_doctor.facts.assemble import EnvironmentInputs, assemble
from attn_doctor.facts.model import Environment
from attn_doctor.releases.facts import snapshot
from attn_doctor.releases.messages import Catalogue, catalogue

EXIT_CAUSE_FOUND, EXIT_NO_CAUSE, EXIT_INPUT_ERROR = 0, 1, 2


@dataclass
class Explanation:
    source: str  # the file name, or "-" for stdin
    bytes_read: int
    lines: int
    environment: Environment
    causes: list[Cause]  # most likely first
    rules_with_symptoms: int
    problems: list[str]  # input problems (a bad --rules file, broken metadata): exit 2
    origins: list[Origin] = field(default_factory=list)  # where its error lines come from (catalogue)
    implied: list[ImpliedReleases] = field(default_factory=list)  # the releases those lines narrow to
    # matched rules about a package neither the target nor the log names: not causes
    elsewhere: list[Cause] = field(default_factory=list)
    # causes no rule names, from the origins, frames and release facts (reasoners): below the rules
    reasoned: list[Reasoned] = field(default_factory=list)
    unexplained: list[Unexplained] = field(default_factory=list)  # error lines nothing explains, and why

    @property
    def ruled_out(self) -> bool:
        """Every rule the log matches is ruled out by the stack's facts: no known cause fits."""
        return bool(self.causes) and all(c.finding.verdict is Verdict.NOT_AFFECTED for c in self.causes)

    @property
    def exit_code(self) -> int:
        if self.problems:
            return EXIT_INPUT_ERROR
        found = (self.causes and not self.ruled_out) or self.reasoned
        return EXIT_CAUSE_FOUND if found else EXIT_NO_CAUSE


def explain(source: str, inputs: EnvironmentInputs, config: Config, extra_rules: list[Path]) -> Explanation:
    """Read the log ``source`` (a file, or ``-`` for stdin) and rank the rules it shows symptoms of."""
    ruleset = load_rules([database_path(), *extra_rules])
    messages = catalogue()
    symptoms = compile_symptoms(ruleset.rules, messages)
    stated = log_facts.LogFactCollector()
    error_lines = ErrorLines()
    with open_log(source) as stream:
        reader = LogReader(stream, source)
        hits = scan(_feeding(reader, stated, error_lines), symptoms)
    found = origins(error_lines.lines(), messages)
    if not any(origin.line in dict(error_lines.errors()) for origin in found):  # no error line traced
        found = sorted([*found, *origins(error_lines.tail(), messages)], key=lambda origin: origin.line)
    implied = _imply(found, messages, stated.facts)
    env, fact_problems = assemble(replace(inputs, log=stated.facts), config)
    observed = tuple(stated.facts.missing)
    findings = [match(rule, env, observed=observed) for rule in ruleset.rules]
    # a package is in the story when the target has it, or the log names it or prints its messages
    named = set(env.packages) | stated.facts.mentioned | {m.package for o in found for m in o.messages}
    causes: list[Cause] = []
    elsewhere: list[Cause] = []
    for cause in rank(findings, symptoms, hits, stated.facts.innermost_package, error_lines.last_error()):
        cause = annotate(cause, found)
        (elsewhere if outside_its_package(cause, named) else causes).append(cause)
    evidence = Evidence(
        found,
        stated.facts,
        env,
        messages,
        error_lines.last_error(),
        frozenset(_explained(causes)),
        tuple(sorted({*error_lines.lines(), *error_lines.tail()})),
    )
    reasoned = reason(evidence)
    covered = _matched(causes) | {origin.line for origin in found} | {cause.line for cause in reasoned}
    return Explanation(
        source=source,
        bytes_read=reader.bytes_read,
        lines=reader.lines,
        environment=env,
        causes=causes,
        elsewhere=elsewhere,
        rules_with_symptoms=sum(bool(rule.symptoms or rule.messages) for rule in ruleset.rules),
        problems=[*ruleset.problems, *fact_problems, *_truncation(reader)],
        origins=found,
        implied=implied,
        reasoned=reasoned,
        unexplained=unexplained(error_lines.errors(), covered, stated.facts.frames, messages),
    )


def _matched(causes: list[Cause]) -> set[int]:
    """Every line a rule that fits (or may) matched."""
    return {
        line
        for cause in causes
        if cause.finding.verdict is not Verdict.NOT_AFFECTED
        for match in cause.matches
        for line in (match.first.line, match.last.line)
    }


def _explained(causes: list[Cause]) -> set[int]:
    """The lines a rule that fits (or may) matched by a message of its own: a reasoner adds nothing
    there. A line only a generic match explains is still reasoned about."""
    return {
        line
        for cause in causes
        if cause.finding.verdict is not Verdict.NOT_AFFECTED
        for match in cause.matches
        if not match.generic or cause.confirmed  # a generic line the release facts confirm is explained
        for line in (match.first.line, match.last.line)
    }


def _imply(found: list[Origin], messages: Catalogue, facts: log_facts.LogFacts) -> list[ImpliedReleases]:
    """The releases the log's messages narrow each package to, added to its facts (where the log
    states no version): a rule's range is then decided on them, each labelled "from the message"."""
    newest = {name: (info.get("releases_read") or [""])[-1] for name, info in messages.packages.items()}
    implied = implied_releases(found, newest)
    releases = snapshot()
    for each in implied:
        known = releases.releases(each.package) if each.package in releases.meta.get("packages", {}) else {}
        facts.imply(each.package, each.releases(known), each.line)
    return implied


def _truncation(reader: LogReader) -> list[str]:
    if not reader.truncated:
        return []
    return [f"{reader.name}: only the first {reader.max_bytes >> 30} GiB were read (give the end of the log)"]


def _feeding(
    blocks: Iterable[Block], collector: log_facts.LogFactCollector, error_lines: ErrorLines
) -> Iterator[Block]:
    """The blocks, each also read for the facts the log states and its error lines (one pass)."""
    for block in blocks:
        collector.feed(block)
        error_lines.feed(block)
        yield block
