"""`check --distributed` and `merge` end to end: members in, one ClusterResult out."""

from __future__ import annotations

from pathlib import Path

from attn_doctor.cluster.gather import gather, launch_from_environment
from attn_doctor.cluster.member import Member, this_rank
from attn_doctor.cluster.merge import ClusterResult, merge
from attn_doctor.config import Config
from attn_doctor.engine.loader import RuleSet
from attn_doctor.facts.assemble import ProjectFeatures
from attn_doctor.facts.model import Environment


def distributed_check(
    env: Environment,
    ruleset: RuleSet,
    config: Config,
    fail_on: str | None,
    fail_on_unknown: bool,
    timeout_s: float,
) -> ClusterResult | None:
    """This rank's facts go to rank 0; rank 0 gets the merged result, every other rank None."""
    launch = launch_from_environment()
    arrived, missing = gather(this_rank(env, launch.rank).to_json_dict(), launch, timeout_s)
    if launch.rank != 0:
        return None
    members = [Member.from_json_dict(data, f"rank {data.get('rank')}") for data in arrived]
    absent = [f"rank {rank} (no report within {timeout_s:g} s)" for rank in missing]
    return merge(members, ruleset, config, fail_on, fail_on_unknown, absent)


def merge_files(
    paths: list[Path],
    project: ProjectFeatures,
    ruleset: RuleSet,
    config: Config,
    fail_on: str | None,
    fail_on_unknown: bool,
) -> ClusterResult:
    """Per-node `probe --json` files, for clusters where torchrun is not how jobs start. A probe
    file holds the node's machine; what the code uses comes from the project, as for
    `check --env-file` on each node (the project scanned once)."""
    from attn_doctor.facts.whatif import load_environment_file

    members = []
    for path in paths:
        env = load_environment_file(path)
        env.features = project.over(env.features)
        members.append(Member(str(path), env))
    return merge(members, ruleset, config, fail_on, fail_on_unknown)
