"""The four upstream artifacts of ``rl_mix`` built from the small long-context fixtures, shared by the mixture tests
and the export tests."""

from __future__ import annotations

from functools import cache

from longctx_fixtures import qa_filtered, tokenizer_artifact, world_documents

from data_contracts.stage import FrameArtifact, get_stage
from tasks.longctx import keychain, math_seeds, needles, rl_mix  # noqa: F401  (registers the stages)


def _run(name: str, params: dict, stage_inputs: dict) -> FrameArtifact:
    stage = get_stage(name)
    return FrameArtifact(stage.run(stage_inputs, stage.parse_params(params), "p0"))


@cache
def mix_inputs() -> dict[str, FrameArtifact]:
    world = FrameArtifact({"documents": world_documents()})
    return {
        "keychain": _run("keychain", {"n": 6, "n_regular": 5, "target_tokens": 1536},
                         {"qa_filtered": qa_filtered(), "tokenizer": tokenizer_artifact()}),
        "needles": _run("needles", {"n_multikey": 2, "n_multivalue": 2, "target_tokens": 1536},
                        {"world": world, "tokenizer": tokenizer_artifact()}),
        "math_seeds": _run("math_seeds", {"n_hard": 10, "n_easy": 10}, {}),
        "qa_filtered": qa_filtered(),
    }
