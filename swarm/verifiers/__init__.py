"""Verifiers: the verifiable reward gym (r_perf), chosen by name from a registry.

Registered names: ``exact``, ``numeric`` (:mod:`.match`), ``table`` (:mod:`.table`, WideSearch
compatible), ``code`` (:mod:`.code`, unit tests in the sandbox), ``instructions``
(:mod:`.instructions`), ``rubric`` and ``rubric_pairwise`` (:mod:`.judge`, LLM judge).
"""

from agent_swarm.swarm.verifiers import code, instructions, judge, match, table
from agent_swarm.swarm.verifiers.code import CodeArgs
from agent_swarm.swarm.verifiers.instructions import InstructionArgs, check_constraints
from agent_swarm.swarm.verifiers.judge import (
    K2_RUBRIC,
    CriterionScore,
    Judgement,
    PairwiseJudgement,
    RubricCriterion,
    judge_pairwise,
    judge_pointwise,
)
from agent_swarm.swarm.verifiers.match import extract_answer, normalize_text, parse_number
from agent_swarm.swarm.verifiers.registry import (
    VERIFIERS,
    Verdict,
    VerifierArgs,
    VerifierContext,
    VerifierSpec,
    get_verifier,
    register_verifier,
    validate_verifier_args,
    verifier_names,
    verify,
)
from agent_swarm.swarm.verifiers.table import ColumnRule, TableScore, extract_markdown_table, score_table

__all__ = [
    "K2_RUBRIC",
    "VERIFIERS",
    "CodeArgs",
    "ColumnRule",
    "CriterionScore",
    "InstructionArgs",
    "Judgement",
    "PairwiseJudgement",
    "RubricCriterion",
    "TableScore",
    "Verdict",
    "VerifierArgs",
    "VerifierContext",
    "VerifierSpec",
    "check_constraints",
    "code",
    "extract_answer",
    "extract_markdown_table",
    "get_verifier",
    "instructions",
    "judge",
    "judge_pairwise",
    "judge_pointwise",
    "match",
    "normalize_text",
    "parse_number",
    "register_verifier",
    "score_table",
    "table",
    "validate_verifier_args",
    "verifier_names",
    "verify",
]
